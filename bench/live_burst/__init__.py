"""`python -m bench live_burst`: does the live inventory keep up with a burst of node changes?"""
