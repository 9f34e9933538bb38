"""The private internals of Optuna and torch that autotune reaches, one module per library
(``optuna_private``, ``torch_private``, each imported on its own: a rank imports torch's without Optuna).
Nothing else in autotune names a private attribute of either (tests/test_architecture.py), and
tests/test_compat.py names any that a new version moved."""
