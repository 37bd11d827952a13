"""The analytical model's shared parts: the hardware table, the registry, the CLI's hardware table.

CPU only and fast: the model is pure Python and never touches a GPU. Per family: test_<family>_model.py;
a toy family end to end: test_family.py.
"""
import dataclasses
import os
import subprocess
import sys

import pytest

from mymetaops.model import (HARDWARE, HardwareSpec, all_ops, detect_hardware, families, family_of, get_family,
                             get_hardware)
from mymetaops.model import family, hardware

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
H200 = get_hardware("H200")


# --- hardware ------------------------------------------------------------------------------------

def test_table_has_every_device():
    assert set(HARDWARE) == {"H100", "H200", "B200", "MI300X", "MI325X", "MI350X", "MI355X"}


@pytest.mark.parametrize("name", list(HARDWARE))
def test_spec_is_complete_and_consistent(name):
    s = HARDWARE[name]
    assert s.name == name
    assert (s.vendor, s.warp_size, s.arch[:3]) in {("nvidia", 32, "sm_"), ("amd", 64, "gfx")}
    for f in dataclasses.fields(HardwareSpec):
        value = getattr(s, f.name)
        if isinstance(value, (int, float)):
            assert value > 0, f.name
    assert 0 < s.copy_efficiency <= 1 and s.achievable_hbm_tbps < s.hbm_tbps
    assert s.mem_latency_ns > s.llc_latency_ns
    assert s.max_threads_per_sm % s.warp_size == 0
    assert s.registers_per_sm // s.max_threads_per_sm >= 32  # full occupancy at 32 registers
    assert set(s.peak_tflops) == set(hardware.DTYPES)
    p = s.peak_tflops
    assert p["fp8"] >= p["bf16"] == p["fp16"] >= p["tf32"] >= p["fp32"]
    with pytest.raises(TypeError):
        s.peak_tflops["fp32"] = 0.0  # shared and hashed: read-only
    assert hash(s) == hash(dataclasses.replace(s))


def test_lookup_is_case_insensitive_and_unknown_names_list_the_known():
    assert get_hardware("mi350x") is HARDWARE["MI350X"]
    assert get_hardware(" h200 ") is H200
    with pytest.raises(KeyError, match="MI300X"):
        get_hardware("A100")


@pytest.mark.parametrize("name, gcn_arch, sms, memory, expected", [
    ("NVIDIA H200", "", 132, 141e9, "H200"),
    ("NVIDIA H100 80GB HBM3", "", 132, 80e9, "H100"),
    ("NVIDIA H100 PCIe", "", 114, 80e9, None),  # a cut-down part: built from its properties
    ("NVIDIA B200", "", 148, 180e9, "B200"),
    ("AMD Instinct MI300X", "gfx942:sramecc+:xnack-", 304, 192e9, "MI300X"),
    ("AMD Instinct MI325X", "gfx942:sramecc+:xnack-", 304, 256e9, "MI325X"),
    ("AMD Radeon Graphics", "gfx950:sramecc+:xnack-", 256, 288e9, "MI350X"),
    ("AMD Instinct MI355X", "gfx950", 256, 288e9, "MI355X"),
    ("AMD Instinct MI300X", "gfx942", 38, 24e9, None),  # a CPX partition
])
def test_detection_matches_name_arch_and_size(name, gcn_arch, sms, memory, expected):
    spec = hardware._match(name, gcn_arch, sms, memory)
    assert (spec.name if spec else None) == expected


def test_detect_hardware_without_gpu_says_so():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        assert detect_hardware().sm_count > 0
    else:
        with pytest.raises(RuntimeError, match="no GPU"):
            detect_hardware()


# --- the registry --------------------------------------------------------------------------------

def test_importing_the_model_registers_every_listed_family():
    names = {f.name for f in families()}
    assert {m.rsplit(".", 1)[1] for m in family.FAMILY_MODULES} <= names
    for f in families():
        assert all(family_of(op) is f for op in f.ops) and get_family(f.name) is f
    assert set(all_ops()) >= {"embedding_bag", "embedding_bag_backward"}


def test_unknown_ops_and_families_list_the_known():
    with pytest.raises(ValueError, match="unknown op 'jagged_softmax'; known: .*embedding_bag"):
        family_of("jagged_softmax")
    with pytest.raises(ValueError, match="unknown family"):
        get_family("nope")


def test_an_op_belongs_to_one_family():
    taken = families()[0]

    class Thief(type(taken)):
        name = "thief"

    with pytest.raises(ValueError, match="already belongs"):
        family.register(Thief())
    assert "thief" not in {f.name for f in families()}


# --- command line --------------------------------------------------------------------------------

def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "mymetaops.model", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_cli_hardware_table_and_unknown_device():
    r = run_cli("hardware")
    assert r.returncode == 0 and all(name in r.stdout for name in HARDWARE)
    r = run_cli("explain", "embedding_bag", "--device", "Z80", "--rows", "1", "--dim", "1", "--bags", "1",
                "--bag-size", "1")
    assert r.returncode == 2 and "unknown hardware" in r.stderr


def test_the_model_and_explain_import_nothing_heavy():
    code = ("import sys, mymetaops._explain, mymetaops.model; "
            "print(sorted(m for m in ('torch', 'triton', 'mymetaops._C', 'mymetaops.ops') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stderr
