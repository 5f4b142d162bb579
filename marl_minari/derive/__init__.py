"""New datasets made from others: combining them (:mod:`~marl_minari.derive.combine`) and
subsets of them (:mod:`~marl_minari.derive.subsets`)."""
