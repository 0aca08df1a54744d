"""What reports to people: `gpuclass explain` and the Pod report, the inventory report, placement fidelity.

May import every other room of webhook.core; nothing in webhook.core imports it.
"""
