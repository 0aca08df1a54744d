"""Tests for webhook.core.labeller.nvidia_smi: recorded real outputs first, then hand-made edge cases."""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook.core.labeller.nvidia_smi import (
    FALLBACK_QUERY_COMMAND,
    QUERY_COMMAND,
    Gpu,
    NvidiaSmiParseError,
    parse_list_gpus,
    parse_nvidia_smi_output,
    parse_query_csv,
    parse_table,
)

FIXTURES = Path(__file__).parent / "fixtures" / "nvidia-smi"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


A100_80 = Gpu(index=0, name="NVIDIA A100-SXM4-80GB", memory_mib=81920, mig_mode="unknown")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        pytest.param(
            "csv_name-memtotal-driver_8x_A100-SXM4-80GB.csv",
            tuple(Gpu(index=i, name="NVIDIA A100-SXM4-80GB", memory_mib=81920, mig_mode="unknown") for i in range(8)),
            id="real-csv-header-units-8x-a100-no-index-column",
        ),
        pytest.param(
            "csv_index-name-memtotal-memused-util_2x_RTX-A6000.csv",
            (
                Gpu(index=0, name="NVIDIA RTX A6000", memory_mib=49140, mig_mode="unknown"),
                Gpu(index=1, name="NVIDIA RTX A6000", memory_mib=49140, mig_mode="unknown"),
            ),
            id="real-csv-extra-columns-percent-units-2x-a6000",
        ),
        pytest.param(
            "nvidia-cloud-native-docs_gpu-operator-mig_nvidia-smi-L_A100-SXM4-40GB_7x1g.5gb.txt",
            (Gpu(index=0, name="A100-SXM4-40GB", memory_mib=None, mig_mode="enabled", mig_devices=("1g.5gb",) * 7),),
            id="real-list-gpus-mig-7x1g.5gb-old-driver-no-nvidia-prefix",
        ),
        pytest.param(
            "L_GTX1660Ti_from_issue.txt",
            (Gpu(index=0, name="GeForce GTX 1660 Ti", memory_mib=None, mig_mode="unknown"),),
            id="real-list-gpus-missing-closing-paren-no-final-newline",
        ),
        pytest.param(
            "nvidia-cloud-native-docs_gpu-sharing_nvidia-smi_TeslaT4_timesliced.txt",
            (Gpu(index=0, name="Tesla T4", memory_mib=15360, mig_mode="unsupported"),),
            id="real-table-tesla-t4-processes-section-ignored",
        ),
    ],
)
def test_parses_recorded_real_outputs(name: str, expected: tuple[Gpu, ...]) -> None:
    assert parse_nvidia_smi_output(fixture(name)) == expected


# Hand-made: the newer (R525+) table layout, with the timestamp line nvidia-smi prints first and
# a MIG devices section, neither of which is in the recorded table above.
NEW_LAYOUT_TABLE = """\
Mon Nov  3 10:00:00 2025
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |
|-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|                                         |                        |               MIG M. |
|=========================================+========================+======================|
|   0  NVIDIA H100 80GB HBM3          On  |   00000000:18:00.0 Off |                    0 |
| N/A   27C    P0             69W /  700W |       0MiB /  81559MiB |      0%      Default |
|                                         |                        |             Disabled |
+-----------------------------------------+------------------------+----------------------+
|   1  NVIDIA A100-SXM4-40GB          On  |   00000000:2A:00.0 Off |                   On |
| N/A   30C    P0             45W /  400W |      13MiB /  40960MiB |     N/A      Default |
|                                         |                        |              Enabled |
+-----------------------------------------+------------------------+----------------------+

+-----------------------------------------------------------------------------------------+
| MIG devices:                                                                            |
+------------------+----------------------------------+-----------+-----------------------+
|   1    1   0   0 |              13MiB / 40192MiB    | 98      0 |  7   0    5    1    1 |
+------------------+----------------------------------+-----------+-----------------------+
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "index, name, memory.total [MiB], mig.mode.current\n"
            "0, NVIDIA H100 80GB HBM3, 81559, Disabled\n"
            "1, NVIDIA H100 80GB HBM3, 81559, Disabled\n",
            (
                Gpu(index=0, name="NVIDIA H100 80GB HBM3", memory_mib=81559, mig_mode="disabled"),
                Gpu(index=1, name="NVIDIA H100 80GB HBM3", memory_mib=81559, mig_mode="disabled"),
            ),
            id="labeller-query-header-nounits",
        ),
        pytest.param(
            "0, NVIDIA A100-SXM4-80GB, 81920, Enabled\n",
            (Gpu(index=0, name="NVIDIA A100-SXM4-80GB", memory_mib=81920, mig_mode="enabled"),),
            id="noheader-nounits-mig-enabled",
        ),
        pytest.param(
            "0, NVIDIA A100-SXM4-80GB, 81920 MiB, [N/A]\n",
            (Gpu(index=0, name="NVIDIA A100-SXM4-80GB", memory_mib=81920, mig_mode="unsupported"),),
            id="noheader-with-units-mig-bracketed-na",
        ),
        pytest.param(
            "0, Tesla V100-SXM2-16GB, [N/A], N/A\n",
            (Gpu(index=0, name="Tesla V100-SXM2-16GB", memory_mib=None, mig_mode="unsupported"),),
            id="memory-na-and-bare-na",
        ),
        pytest.param(
            "0, NVIDIA A100-SXM4-80GB, 81920, [Not Supported]\n",
            (Gpu(index=0, name="NVIDIA A100-SXM4-80GB", memory_mib=81920, mig_mode="unsupported"),),
            id="mig-not-supported",
        ),
        pytest.param(
            "3, NVIDIA L4, 23034, Disabled\n0, NVIDIA L40S, 46068, Disabled\n",
            (
                Gpu(index=3, name="NVIDIA L4", memory_mib=23034, mig_mode="disabled"),
                Gpu(index=0, name="NVIDIA L40S", memory_mib=46068, mig_mode="disabled"),
            ),
            id="mixed-models-order-and-indexes-kept",
        ),
        pytest.param(
            "index, name, memory.total [MiB]\n0, Tesla V100-SXM2-16GB, 16384\n",
            (Gpu(index=0, name="Tesla V100-SXM2-16GB", memory_mib=16384, mig_mode="unknown"),),
            id="fallback-query-without-mig-column",
        ),
        pytest.param(
            "mig.mode.current, memory.total [MiB], name, index\nEnabled, 40960 MiB, A100-SXM4-40GB, 2\n",
            (Gpu(index=2, name="A100-SXM4-40GB", memory_mib=40960, mig_mode="enabled"),),
            id="header-columns-in-any-order",
        ),
        pytest.param(
            "0, NVIDIA A10, 23028, Disabled\r\n1, NVIDIA A10, 23028, Disabled\r\n",
            (
                Gpu(index=0, name="NVIDIA A10", memory_mib=23028, mig_mode="disabled"),
                Gpu(index=1, name="NVIDIA A10", memory_mib=23028, mig_mode="disabled"),
            ),
            id="crlf-line-endings",
        ),
        pytest.param(
            "WARNING: infoROM is corrupted at gpu 0000:3B:00.0\n\n0, Tesla T4, 15360, [N/A]\n",
            (Gpu(index=0, name="Tesla T4", memory_mib=15360, mig_mode="unsupported"),),
            id="driver-warning-and-blank-lines-skipped",
        ),
        pytest.param(
            "0,NVIDIA GeForce RTX 4090,24564,[N/A]\n",
            (Gpu(index=0, name="NVIDIA GeForce RTX 4090", memory_mib=24564, mig_mode="unsupported"),),
            id="no-space-after-commas",
        ),
        pytest.param(
            "0, NVIDIA A100-SXM4-80GB, 81920, Pending\n",
            (Gpu(index=0, name="NVIDIA A100-SXM4-80GB", memory_mib=81920, mig_mode="unknown"),),
            id="unknown-mig-state-not-guessed",
        ),
        pytest.param(
            "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-1)\n"
            "  MIG 3g.40gb      Device  0: (UUID: MIG-2)\n"
            "  MIG 3g.40gb      Device  1: (UUID: MIG-3)\n"
            "GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-4)\n",
            (
                Gpu(index=0, name="NVIDIA A100-SXM4-80GB", memory_mib=None, mig_mode="enabled",
                    mig_devices=("3g.40gb", "3g.40gb")),
                Gpu(index=1, name="NVIDIA A100-SXM4-80GB", memory_mib=None, mig_mode="unknown"),
            ),
            id="list-gpus-mig-on-one-of-two-newer-driver-spacing",
        ),
        pytest.param(
            NEW_LAYOUT_TABLE,
            (
                Gpu(index=0, name="NVIDIA H100 80GB HBM3", memory_mib=81559, mig_mode="disabled"),
                Gpu(index=1, name="NVIDIA A100-SXM4-40GB", memory_mib=40960, mig_mode="enabled"),
            ),
            id="table-new-layout-timestamp-and-mig-section",
        ),
    ],
)
def test_parses_hand_made_shapes(text: str, expected: tuple[Gpu, ...]) -> None:
    assert parse_nvidia_smi_output(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("", "no output", id="empty"),
        pytest.param("\n  \n", "no output", id="blank"),
        pytest.param("index, name, memory.total [MiB], mig.mode.current\n", "header only", id="header-only"),
        pytest.param("0, NVIDIA A10, 23028\n", "3 values for 4 columns", id="too-few-columns"),
        pytest.param("0, NVIDIA A10, 23028, Disabled, extra\n", "5 values for 4 columns", id="too-many-columns"),
        pytest.param("x, NVIDIA A10, 23028, Disabled\n", "index 'x'", id="index-not-a-number"),
        pytest.param("0, NVIDIA A10, 22 GiB, Disabled\n", "memory.total '22 GiB'", id="memory-other-unit"),
        pytest.param("0, [N/A], 23028, Disabled\n", "without a name", id="name-na"),
        pytest.param("index, memory.total [MiB]\n0, 23028\n", "no 'name' column", id="no-name-column"),
        pytest.param("GPU 0: NVIDIA A10 (UUID: GPU-1)\nsomething else\n", "line 2", id="list-gpus-junk-line"),
        pytest.param("No devices were found\n", "found no GPU", id="no-devices-message"),
        pytest.param(
            NEW_LAYOUT_TABLE.replace("NVIDIA H100 80GB HBM3         ", "NVIDIA GeForce RTX 4090 Lap..."),
            "truncated",
            id="table-truncated-name-refused",
        ),
        pytest.param("+------+\n| nothing |\n+------+\n", "no GPU row", id="table-without-gpu-rows"),
    ],
)
def test_rejects_what_it_cannot_read(text: str, message: str) -> None:
    with pytest.raises(NvidiaSmiParseError, match=message.replace("(", r"\(").replace("[", r"\[")):
        parse_nvidia_smi_output(text)


def test_headerless_csv_takes_the_columns_it_is_given() -> None:
    gpus = parse_query_csv("NVIDIA L4, 23034\n", fields=("name", "memory.total"))
    assert gpus == (Gpu(index=0, name="NVIDIA L4", memory_mib=23034, mig_mode="unknown"),)


def test_specific_parsers_agree_with_autodetection() -> None:
    listing = fixture("nvidia-cloud-native-docs_gpu-operator-mig_nvidia-smi-L_A100-SXM4-40GB_7x1g.5gb.txt")
    table = fixture("nvidia-cloud-native-docs_gpu-sharing_nvidia-smi_TeslaT4_timesliced.txt")
    assert parse_list_gpus(listing) == parse_nvidia_smi_output(listing)
    assert parse_table(table) == parse_nvidia_smi_output(table)


def test_query_commands_ask_for_self_describing_csv() -> None:
    # The header stays on so the fallback (no mig.mode.current) parses with the same code.
    assert QUERY_COMMAND == (
        "nvidia-smi",
        "--query-gpu=index,name,memory.total,mig.mode.current",
        "--format=csv,nounits",
    )
    assert FALLBACK_QUERY_COMMAND == ("nvidia-smi", "--query-gpu=index,name,memory.total", "--format=csv,nounits")
    header = "index, name, memory.total [MiB]\n"
    assert parse_nvidia_smi_output(header + "0, Tesla T4, 15360\n")[0].memory_mib == 15360
