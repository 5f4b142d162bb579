"""Ray Data and RLlib: datasets as Ray datasets, RLlib offline exports and training."""
