"""The command-hook client: what an agent runtime spawns per hook. Standard library only."""
