"""`python -m bench churn`: NodeLabelIndex's narrowing and the placement of class Pods through bursts of node
changes."""
