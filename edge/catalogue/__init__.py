"""The model catalogue (``models/catalogue.toml``): which models the service supports,
where each comes from, and checking that they are installed and intact."""

from ._catalogue import (
    BUILTIN_CATALOGUE,
    REPO_ROOT,
    Catalogue,
    CatalogueError,
    ModelEntry,
    ModelMissingError,
    Role,
    default_model_path,
    derived_models_dir,
    read_toml,
    sha256_file,
)
from ._derive import Convert, prepare, prepare_all

__all__ = [
    "BUILTIN_CATALOGUE",
    "REPO_ROOT",
    "Catalogue",
    "CatalogueError",
    "Convert",
    "ModelEntry",
    "ModelMissingError",
    "Role",
    "default_model_path",
    "derived_models_dir",
    "prepare",
    "prepare_all",
    "read_toml",
    "sha256_file",
]
