"""Recipes: a pure decision core and the lock machinery built on the wire session."""
