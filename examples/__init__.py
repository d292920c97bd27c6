"""Examples of extending rstar2-async (see docs/extending.md); the test suite runs them."""
