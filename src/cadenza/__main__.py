"""`python -m cadenza` runs the CLI."""

from cadenza.cli.main import main

if __name__ == "__main__":
    main()
