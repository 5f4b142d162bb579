"""The viewer page's static files (uPlot, vendored with its licence, and the page's own script
and style), shipped as package data and inlined into every page."""
