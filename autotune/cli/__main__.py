"""``python -m autotune.cli``: the same command line as the ``autotune`` console script."""

from autotune.cli._commands import main

if __name__ == "__main__":
    main(prog_name="autotune")
