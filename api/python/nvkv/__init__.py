"""Python access to nvkv, an embeddable key-value store on raw NVMe, through its C API.

A thin layer over libnvkv's C API (nvkv/nvkv_c.h) with ctypes: no compiled extension. Keys and
values are bytes (a str is encoded as UTF-8); every failure raises nvkv.Error, which carries the
status code. nvkv/db.h says what each call does and when a write is durable.

    import nvkv
    with nvkv.DB("my.db", capacity_bytes=64 << 20) as db:
        db.put(b"greeting", b"hello")
        print(db.get(b"greeting"))

The library is found through the environment variable NVKV_LIBRARY (a path to libnvkv.so),
else as libnvkv.so.0 or libnvkv.so on the system's library path (ldconfig, LD_LIBRARY_PATH).
"""

import ctypes
import ctypes.util
import json
import os

__all__ = ["DB", "WriteBatch", "Error", "library_version", "HASH", "ORDERED", "AS_FORMATTED"]

# Index modes (nvkv::IndexMode; NVKV_INDEX_* in nvkv_c.h).
HASH = 0
ORDERED = 1
AS_FORMATTED = 2
_INDEX_MODES = {"hash": HASH, "ordered": ORDERED, "as-formatted": AS_FORMATTED}

# absl::StatusCode values (NVKV_* codes in nvkv_c.h), by name.
_CODE_NAMES = {
    0: "OK", 1: "CANCELLED", 2: "UNKNOWN", 3: "INVALID_ARGUMENT", 4: "DEADLINE_EXCEEDED",
    5: "NOT_FOUND", 6: "ALREADY_EXISTS", 7: "PERMISSION_DENIED", 8: "RESOURCE_EXHAUSTED",
    9: "FAILED_PRECONDITION", 10: "ABORTED", 11: "OUT_OF_RANGE", 12: "UNIMPLEMENTED",
    13: "INTERNAL", 14: "UNAVAILABLE", 15: "DATA_LOSS", 16: "UNAUTHENTICATED",
}


class Error(Exception):
    """A failed call: `code` is the status code (an int, as NVKV_* in nvkv_c.h), `code_name`
    its name ("NOT_FOUND", "DATA_LOSS", ...), `message` the library's words."""

    def __init__(self, code, message):
        self.code = code
        self.code_name = _CODE_NAMES.get(code, "UNKNOWN")
        self.message = message
        super().__init__(f"{self.code_name}: {message}")


def _load_library():
    names = []
    if os.environ.get("NVKV_LIBRARY"):
        names.append(os.environ["NVKV_LIBRARY"])
    names += ["libnvkv.so.0", "libnvkv.so"]
    found = ctypes.util.find_library("nvkv")
    if found:
        names.append(found)
    failures = []
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError as e:
            failures.append(str(e))
    raise ImportError("nvkv: libnvkv not found (set NVKV_LIBRARY to its path): "
                      + "; ".join(failures))


_lib = _load_library()
_c_char_pp = ctypes.POINTER(ctypes.c_char_p)
_PAIR_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                  ctypes.c_void_p, ctypes.c_size_t)


def _declare(name, restype, *argtypes):
    function = getattr(_lib, name)
    function.restype = restype
    function.argtypes = list(argtypes)
    return function


_vp, _sz, _u8, _u32, _u64, _int = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint8,
                                   ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int)
_errcode = _declare("nvkv_errcode", _int, _vp)
_free = _declare("nvkv_free", None, _vp)
_version = _declare("nvkv_version", ctypes.c_char_p)
_options_create = _declare("nvkv_options_create", _vp)
_options_destroy = _declare("nvkv_options_destroy", None, _vp)
_writeoptions_create = _declare("nvkv_writeoptions_create", _vp)
_writeoptions_destroy = _declare("nvkv_writeoptions_destroy", None, _vp)
_writeoptions_set_durable = _declare("nvkv_writeoptions_set_durable", None, _vp, _u8)
_open = _declare("nvkv_open", _vp, _vp, ctypes.c_char_p, ctypes.POINTER(_vp))
_close = _declare("nvkv_close", None, _vp, ctypes.POINTER(_vp))
_put = _declare("nvkv_put", None, _vp, _vp, ctypes.c_char_p, _sz, ctypes.c_char_p, _sz,
                ctypes.POINTER(_vp))
_delete = _declare("nvkv_delete", None, _vp, _vp, ctypes.c_char_p, _sz, ctypes.POINTER(_vp))
_get = _declare("nvkv_get", _vp, _vp, ctypes.c_char_p, _sz, ctypes.POINTER(_sz),
                ctypes.POINTER(_vp))
_multiget = _declare("nvkv_multiget", None, _vp, _sz, ctypes.POINTER(ctypes.c_char_p),
                     ctypes.POINTER(_sz), ctypes.POINTER(_vp), ctypes.POINTER(_sz),
                     ctypes.POINTER(_vp))
_batch_create = _declare("nvkv_writebatch_create", _vp)
_batch_destroy = _declare("nvkv_writebatch_destroy", None, _vp)
_batch_clear = _declare("nvkv_writebatch_clear", None, _vp)
_batch_count = _declare("nvkv_writebatch_count", _sz, _vp)
_batch_put = _declare("nvkv_writebatch_put", None, _vp, ctypes.c_char_p, _sz, ctypes.c_char_p,
                      _sz)
_batch_delete = _declare("nvkv_writebatch_delete", None, _vp, ctypes.c_char_p, _sz)
_write = _declare("nvkv_write", None, _vp, _vp, _vp, ctypes.POINTER(_vp))
_flush = _declare("nvkv_flush", None, _vp, ctypes.POINTER(_vp))
_checkpoint = _declare("nvkv_checkpoint", None, _vp, ctypes.POINTER(_vp))
_compact_all = _declare("nvkv_compact_all", None, _vp, ctypes.POINTER(_vp))
_walk = _declare("nvkv_walk", None, _vp, _PAIR_CALLBACK, _vp, ctypes.POINTER(_vp))
_scan = _declare("nvkv_scan", None, _vp, ctypes.c_char_p, _sz, ctypes.c_char_p, _sz, _sz,
                 _PAIR_CALLBACK, _vp, ctypes.POINTER(_vp))
_iter_create = _declare("nvkv_create_iterator", _vp, _vp)
_iter_destroy = _declare("nvkv_iter_destroy", None, _vp)
_iter_valid = _declare("nvkv_iter_valid", _u8, _vp)
_iter_seek_to_first = _declare("nvkv_iter_seek_to_first", None, _vp)
_iter_seek = _declare("nvkv_iter_seek", None, _vp, ctypes.c_char_p, _sz)
_iter_next = _declare("nvkv_iter_next", None, _vp)
_iter_key = _declare("nvkv_iter_key", _vp, _vp, ctypes.POINTER(_sz))
_iter_value = _declare("nvkv_iter_value", _vp, _vp, ctypes.POINTER(_sz))
_iter_get_error = _declare("nvkv_iter_get_error", None, _vp, ctypes.POINTER(_vp))
_max_value_bytes = _declare("nvkv_max_value_bytes", _u32, _vp)
_stats = _declare("nvkv_stats", _vp, _vp, _u8)

# Options: name -> (C setter, its value type, how a Python value becomes it).
_OPTION_SETTERS = {}
for _name, _ctype in [
        ("create_if_missing", _u8), ("error_if_exists", _u8), ("force_format", _u8),
        ("read_only", _u8), ("lock_wait_ms", _u32), ("capacity_bytes", _u64),
        ("grow_store", _u8), ("open_degraded", _u8), ("index_mode", _int),
        ("max_write_delay_us", _u32), ("background_compaction", _u8),
        ("compaction_policy", _int), ("durable_writes", _int), ("page_bytes", _u32),
        ("segment_bytes", _u32), ("shard_count", _u32), ("page_buffers_per_shard", _u32),
        ("read_queue_depth", _u32), ("write_queue_depth", _u32), ("cache_bytes", _u64),
        ("recovery_memory_bytes", _u64), ("checkpoint_log_ratio", _u32),
        ("checkpoint_min_log_bytes", _u64),
        ("backend", _int), ("allow_sync_fallback", _u8),
        ("single_issuer", _u8), ("register_ring_fd", _u8), ("register_file", _u8),
        ("fixed_buffers", _u8), ("sqpoll", _u8), ("sqpoll_idle_ms", _u32), ("iopoll", _u8)]:
    _OPTION_SETTERS[_name] = _declare("nvkv_options_set_" + _name, None, _vp, _ctype)


def library_version():
    """libnvkv's version, "MAJOR.MINOR.PATCH"."""
    return _version().decode()


def _bytes(data, what):
    if isinstance(data, str):
        return data.encode()
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    raise TypeError(f"nvkv: {what} must be bytes or str, not {type(data).__name__}")


def _take_error(err):
    """Raises the Error an errptr holds (and frees it), if any."""
    if err.value:
        code = _errcode(err.value)
        text = ctypes.string_at(err.value).decode(errors="replace")
        _free(err.value)
        err.value = None
        message = text.split(": ", 1)[1] if ": " in text else text
        raise Error(code, message)


def _call(function, *args):
    err = _vp()
    result = function(*args, ctypes.byref(err))
    _take_error(err)
    return result


def _take_bytes(pointer, length):
    """Copies `length` bytes from a malloc'd value and frees it."""
    if not pointer:
        return None
    try:
        return ctypes.string_at(pointer, length) if length else b""
    finally:
        _free(pointer)


class WriteBatch:
    """Puts and deletes applied atomically by DB.write, in order (a later one for a key wins)."""

    def __init__(self):
        self._handle = _batch_create()
        if not self._handle:
            raise MemoryError("nvkv: no memory for a write batch")

    def put(self, key, value):
        key, value = _bytes(key, "key"), _bytes(value, "value")
        _batch_put(self._handle, key, len(key), value, len(value))
        return self

    def delete(self, key):
        key = _bytes(key, "key")
        _batch_delete(self._handle, key, len(key))
        return self

    def clear(self):
        _batch_clear(self._handle)

    def __len__(self):
        return _batch_count(self._handle)

    def __del__(self):
        if getattr(self, "_handle", None):
            _batch_destroy(self._handle)
            self._handle = None


class DB:
    """An open store. `path` is a store file (created when missing, with `capacity_bytes`), a
    block device or an NVMe namespace (/dev/ngXnY). Keyword arguments set nvkv::Options of the
    same name (nvkv/options.h); `index_mode` takes "hash", "ordered" or "as-formatted" (the
    default: the store's) as well as HASH, ORDERED, AS_FORMATTED. Use it as a context manager,
    or call close(); a DB that is garbage collected open is closed then (errors dropped)."""

    def __init__(self, path, **options):
        handle = _options_create()
        if not handle:
            raise MemoryError("nvkv: no memory for options")
        try:
            for name, value in options.items():
                if name not in _OPTION_SETTERS:
                    raise TypeError(f"nvkv: unknown option {name!r}")
                if name == "index_mode" and isinstance(value, str):
                    if value not in _INDEX_MODES:
                        raise ValueError(f"nvkv: index_mode {value!r}: hash, ordered or "
                                         "as-formatted")
                    value = _INDEX_MODES[value]
                _OPTION_SETTERS[name](handle, int(value))
            self._db = _call(_open, handle, os.fsencode(path))
        finally:
            _options_destroy(handle)
        self._writeoptions = {}
        for durable in (False, True):
            w = _writeoptions_create()
            _writeoptions_set_durable(w, 1 if durable else 0)
            self._writeoptions[durable] = w

    # ----- lifetime -----

    def close(self):
        """Flushes every write and closes the store; an Error means the last writes may not
        be durable. A second close does nothing."""
        if not self._db:
            return
        db, self._db = self._db, None
        for w in self._writeoptions.values():
            _writeoptions_destroy(w)
        self._writeoptions = {}
        _call(_close, db)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        if getattr(self, "_db", None):
            try:
                self.close()
            except Error:
                pass

    def _handle(self):
        if not self._db:
            raise Error(9, "the store is closed")
        return self._db

    # ----- writes -----

    def put(self, key, value, durable=True):
        key, value = _bytes(key, "key"), _bytes(value, "value")
        _call(_put, self._handle(), self._writeoptions[bool(durable)], key, len(key), value,
              len(value))

    def delete(self, key, durable=True):
        """Deleting an absent key succeeds."""
        key = _bytes(key, "key")
        _call(_delete, self._handle(), self._writeoptions[bool(durable)], key, len(key))

    def write(self, batch, durable=True):
        """Applies `batch` (a WriteBatch) atomically."""
        _call(_write, self._handle(), self._writeoptions[bool(durable)], batch._handle)

    def flush(self):
        """Makes every earlier write durable."""
        _call(_flush, self._handle())

    def checkpoint(self):
        """Writes a checkpoint now: Open after a crash reads it and the log written after it.

        Makes every earlier write durable first, even when it then fails (no room for it)."""
        _call(_checkpoint, self._handle())

    def compact_all(self):
        _call(_compact_all, self._handle())

    # ----- reads -----

    def get(self, key, default=None):
        """The value of `key` (bytes), or `default` when it is absent."""
        key = _bytes(key, "key")
        length = _sz()
        value = _take_bytes(_call(_get, self._handle(), key, len(key), ctypes.byref(length)),
                            length.value)
        return default if value is None else value

    def __getitem__(self, key):
        value = self.get(key)
        if value is None:
            raise KeyError(key)
        return value

    def __setitem__(self, key, value):
        self.put(key, value)

    def __delitem__(self, key):
        self.delete(key)

    def __contains__(self, key):
        return self.get(key) is not None

    def multi_get(self, keys):
        """The values of `keys` in their order: bytes, or None for an absent key. Raises the
        first key's error when a read failed."""
        keys = [_bytes(k, "key") for k in keys]
        n = len(keys)
        c_keys = (ctypes.c_char_p * n)(*keys)
        c_lens = (_sz * n)(*[len(k) for k in keys])
        values, lens, errs = (_vp * n)(), (_sz * n)(), (_vp * n)()
        _multiget(self._handle(), n, c_keys, c_lens, values, lens, errs)
        out, failure = [], None
        for i in range(n):
            out.append(_take_bytes(values[i], lens[i]))
            if errs[i]:
                if failure is None:
                    holder = _vp(errs[i])
                    try:
                        _take_error(holder)
                    except Error as e:
                        failure = e
                else:
                    _free(errs[i])
        if failure is not None:
            raise failure
        return out

    def _visit_pairs(self, start_call):
        pairs = []
        error = []

        def visit(_arg, key, keylen, value, vallen):
            try:
                # An empty key or value may come as a null pointer.
                pairs.append((ctypes.string_at(key, keylen) if keylen else b"",
                              ctypes.string_at(value, vallen) if vallen else b""))
                return 0
            except BaseException as e:  # never let an exception cross into C
                error.append(e)
                return 1

        start_call(_PAIR_CALLBACK(visit))
        if error:
            raise error[0]
        return pairs

    def items(self, start=None, end=None, limit=0):
        """The pairs with start <= key < end in key order (None: no bound), at most `limit`
        (0: all), as a list of (key, value). Needs the ordered index (else Error with
        FAILED_PRECONDITION)."""
        s = b"" if start is None else _bytes(start, "start")
        e = b"" if end is None else _bytes(end, "end")
        return self._visit_pairs(
            lambda cb: _call(_scan, self._handle(), s, len(s), e, len(e), int(limit), cb, None))

    def walk(self):
        """Every live pair, in any index mode, in the order of the log (not key order), as a
        list of (key, value)."""
        return self._visit_pairs(lambda cb: _call(_walk, self._handle(), cb, None))

    def __iter__(self):
        """Keys in key order (ordered index): an iterator that reads as it goes."""
        handle = _iter_create(self._handle())
        if not handle:
            raise MemoryError("nvkv: no memory for an iterator")
        try:
            _iter_seek_to_first(handle)
            while _iter_valid(handle):
                length = _sz()
                key = _iter_key(handle, ctypes.byref(length))
                yield ctypes.string_at(key, length.value) if length.value else b""
                _iter_next(handle)
            _call(_iter_get_error, handle)
        finally:
            _iter_destroy(handle)

    # ----- limits and statistics -----

    def max_value_bytes(self):
        return _max_value_bytes(self._handle())

    def stats(self):
        """Counters and configuration as a dict (nvkv::Stats::ToJson)."""
        text = _stats(self._handle(), 1)
        if not text:
            raise MemoryError("nvkv: no memory for the stats")
        try:
            return json.loads(ctypes.string_at(text).decode())
        finally:
            _free(text)
