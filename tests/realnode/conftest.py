from tests.realnode.fixtures import real_node  # noqa: F401
