"""PettingZoo environments: which env code may run, making envs, the joint Gymnasium view."""
