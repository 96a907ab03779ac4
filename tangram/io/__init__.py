"""File formats: the JSON instance and result files, and importers."""

from tangram.io.files import InputError, instance_schema, read_instance, read_model, read_result, write_model

__all__ = ["InputError", "instance_schema", "read_instance", "read_model", "read_result", "write_model"]
