"""pprof's profile.proto (github.com/google/pprof/proto/profile.proto), defined here through
a descriptor so that no generated code or protoc is needed: `Profile` is the message class.
Needs the `protobuf` package; import fails cleanly (ImportError) without it.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto

# (message, [(field name, number, type, label, type name)])
_SCHEMA = {
    "ValueType": [("type", 1, _F.TYPE_INT64, 1, None), ("unit", 2, _F.TYPE_INT64, 1, None)],
    "Label": [("key", 1, _F.TYPE_INT64, 1, None), ("str", 2, _F.TYPE_INT64, 1, None),
              ("num", 3, _F.TYPE_INT64, 1, None), ("num_unit", 4, _F.TYPE_INT64, 1, None)],
    "Sample": [("location_id", 1, _F.TYPE_UINT64, 3, None), ("value", 2, _F.TYPE_INT64, 3, None),
               ("label", 3, _F.TYPE_MESSAGE, 3, "Label")],
    "Mapping": [("id", 1, _F.TYPE_UINT64, 1, None), ("memory_start", 2, _F.TYPE_UINT64, 1, None),
                ("memory_limit", 3, _F.TYPE_UINT64, 1, None), ("file_offset", 4, _F.TYPE_UINT64, 1, None),
                ("filename", 5, _F.TYPE_INT64, 1, None), ("build_id", 6, _F.TYPE_INT64, 1, None),
                ("has_functions", 7, _F.TYPE_BOOL, 1, None), ("has_filenames", 8, _F.TYPE_BOOL, 1, None),
                ("has_line_numbers", 9, _F.TYPE_BOOL, 1, None),
                ("has_inline_frames", 10, _F.TYPE_BOOL, 1, None)],
    "Line": [("function_id", 1, _F.TYPE_UINT64, 1, None), ("line", 2, _F.TYPE_INT64, 1, None)],
    "Location": [("id", 1, _F.TYPE_UINT64, 1, None), ("mapping_id", 2, _F.TYPE_UINT64, 1, None),
                 ("address", 3, _F.TYPE_UINT64, 1, None), ("line", 4, _F.TYPE_MESSAGE, 3, "Line"),
                 ("is_folded", 5, _F.TYPE_BOOL, 1, None)],
    "Function": [("id", 1, _F.TYPE_UINT64, 1, None), ("name", 2, _F.TYPE_INT64, 1, None),
                 ("system_name", 3, _F.TYPE_INT64, 1, None), ("filename", 4, _F.TYPE_INT64, 1, None),
                 ("start_line", 5, _F.TYPE_INT64, 1, None)],
    "Profile": [("sample_type", 1, _F.TYPE_MESSAGE, 3, "ValueType"), ("sample", 2, _F.TYPE_MESSAGE, 3, "Sample"),
                ("mapping", 3, _F.TYPE_MESSAGE, 3, "Mapping"), ("location", 4, _F.TYPE_MESSAGE, 3, "Location"),
                ("function", 5, _F.TYPE_MESSAGE, 3, "Function"), ("string_table", 6, _F.TYPE_STRING, 3, None),
                ("drop_frames", 7, _F.TYPE_INT64, 1, None), ("keep_frames", 8, _F.TYPE_INT64, 1, None),
                ("time_nanos", 9, _F.TYPE_INT64, 1, None), ("duration_nanos", 10, _F.TYPE_INT64, 1, None),
                ("period_type", 11, _F.TYPE_MESSAGE, 1, "ValueType"), ("period", 12, _F.TYPE_INT64, 1, None),
                ("comment", 13, _F.TYPE_INT64, 3, None), ("default_sample_type", 14, _F.TYPE_INT64, 1, None)],
}


def _build():
    fd = descriptor_pb2.FileDescriptorProto(name="strata_profile.proto", package="perftools.profiles",
                                            syntax="proto3")
    for msg, fields in _SCHEMA.items():
        m = fd.message_type.add(name=msg)
        for name, num, typ, label, tname in fields:
            f = m.field.add(name=name, number=num, type=typ, label=label)
            if tname:
                f.type_name = ".perftools.profiles." + tname
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    desc = pool.FindMessageTypeByName("perftools.profiles.Profile")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(desc)
    return message_factory.MessageFactory(pool).GetPrototype(desc)  # protobuf < 4.21


Profile = _build()
