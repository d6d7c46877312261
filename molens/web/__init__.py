"""The Bottle REST API, OpenAPI document, metrics, and the built UI."""
