"""The process runtime: one supervised process and the pieces it is made of."""

from .process import ProcessEvents, SupervisedProcess

__all__ = ["ProcessEvents", "SupervisedProcess"]
