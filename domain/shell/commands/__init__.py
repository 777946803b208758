"""One judge module per command family; the walker (domain/shell/walker.py) assembles them."""
