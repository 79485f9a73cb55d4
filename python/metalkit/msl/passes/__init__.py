"""The front end's passes, in the order msl/prepass.py runs them."""
