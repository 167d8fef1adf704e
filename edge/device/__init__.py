"""Device profiles, hardware detection, calibration and byte budgets sized to the device.

``load_device_config()`` picks the profile (argument, ``EDGE_PROFILE``, or detection),
applies the detected hardware limits and any stored calibration, and derives the budgets
the service passes on (``llm_config()``, ``context_config()``, ``router_config()``).
"""

from ._accel import (
    BuildPlan,
    build_plan,
    llama_gpu_offload,
    llama_system_info,
    nvidia_gpus,
    whisper_cuda,
)
from ._budgets import BudgetError, BudgetInputs, Budgets, derive_budgets
from ._calibration import (
    Calibration,
    CalibrationError,
    CalibrationStore,
    Measurement,
    SpeedRun,
    calibrate,
    calibration_text,
    config_dir,
    measure_llm,
    measure_run,
)
from ._config import (
    ContextBudgets,
    DeviceConfig,
    budget_inputs,
    calibrate_device,
    derive_for_profile,
    load_device_config,
)
from ._detect import HardwareInfo, detect_hardware
from ._placement import Placement, offload_warning, placement, stt_device
from ._profile import (
    PROFILE_DIR,
    DeviceProfile,
    ProfileError,
    Speed,
    find_profile,
    load_profile_file,
    load_profiles,
    parse_profile,
)
from ._select import ENV_PROFILE, ProfileChoice, choose_profile

__all__ = [
    "ENV_PROFILE",
    "PROFILE_DIR",
    "BudgetError",
    "BudgetInputs",
    "Budgets",
    "BuildPlan",
    "Calibration",
    "CalibrationError",
    "CalibrationStore",
    "ContextBudgets",
    "DeviceConfig",
    "DeviceProfile",
    "HardwareInfo",
    "Measurement",
    "Placement",
    "ProfileChoice",
    "ProfileError",
    "Speed",
    "SpeedRun",
    "budget_inputs",
    "build_plan",
    "calibrate",
    "calibrate_device",
    "calibration_text",
    "choose_profile",
    "config_dir",
    "derive_budgets",
    "derive_for_profile",
    "detect_hardware",
    "find_profile",
    "llama_gpu_offload",
    "llama_system_info",
    "load_device_config",
    "load_profile_file",
    "load_profiles",
    "measure_llm",
    "measure_run",
    "nvidia_gpus",
    "offload_warning",
    "parse_profile",
    "placement",
    "stt_device",
    "whisper_cuda",
]
