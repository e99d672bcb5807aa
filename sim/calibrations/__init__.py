"""Calibration files shipped with moesim (package data; see sim.calibration.BUNDLED)."""
