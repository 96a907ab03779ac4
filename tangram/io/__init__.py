"""File formats: the JSON instance and result files, and importers."""

from tangram.io.files import InputError, instance_schema, read_instance, read_model, read_result, write_model
from tangram.io.psplib import parse_psplib, read_psplib

__all__ = ["InputError", "instance_schema", "parse_psplib", "read_instance", "read_model", "read_psplib",
           "read_result", "write_model"]
