"""Command-line interface: `tachograph <command>` (cli.main:main)."""
