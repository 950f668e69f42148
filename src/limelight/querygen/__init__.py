"""Query generation: controllable generation (CtrlQGen), query variations and simulated queries."""
