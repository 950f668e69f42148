"""``python -m limelight.cli``: the ``limelight`` command."""

from limelight.cli.root import main

if __name__ == "__main__":
    main()
