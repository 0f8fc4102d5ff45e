"""`python -m cadenza` runs the CLI."""

from cadenza.cli.main import main

main()
