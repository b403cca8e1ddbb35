"""The orders app: the model, `place_order()`, the worker's handler, and its tests."""
