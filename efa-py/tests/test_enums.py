"""The enums of ``efa.enums`` carry rdma-core's ABI values: each member equals the
constant of the C headers' bindings that the Rust core is built on (``_efa._abi()``),
and no enum or member goes unchecked."""

import enum

import efa
import efa.enums
from efa import _efa


def _enums():
    return {
        name: cls
        for name, cls in vars(efa.enums).items()
        if isinstance(cls, type)
        and issubclass(cls, (enum.IntEnum, enum.IntFlag))
        and cls.__module__ == efa.enums.__name__
    }


def test_every_enum_member_is_the_bindings_value():
    abi = _efa._abi()
    ours = _enums()
    assert set(ours) == set(abi), "an enum without binding values, or the reverse"
    for name, cls in ours.items():
        members = {k: int(m.value) for k, m in cls.__members__.items()}
        assert members == abi[name], name


def test_the_enums_are_the_packages_names():
    for name, cls in _enums().items():
        assert getattr(efa, name) is cls
