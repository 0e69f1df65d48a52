"""Gate: the regression check between two runs. Takes two run directories; gives each gated metric's move against
the runs' own noise, and an exit code CI can act on (``dflashbench compare``)."""
