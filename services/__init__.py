"""Application services that wire the domain to the stores and the outside world."""
