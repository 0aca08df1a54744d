"""`python -m bench binds`: what judging each bind costs the watch, in-process."""
