"""Tests of the Python package (nvkv/__init__.py) against the libnvkv that NVKV_LIBRARY names."""

import os
import shutil
import tempfile
import unittest

import nvkv


class NvkvTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="nvkv-python-")
        self.path = os.path.join(self.dir, "store.db")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def open(self, **options):
        options.setdefault("capacity_bytes", 32 << 20)
        return nvkv.DB(self.path, **options)

    def test_put_get_delete_across_reopen(self):
        with self.open() as db:
            db.put(b"k", b"v")
            db.put("text key", "text value")
            db.put(b"zero\x00byte", b"\x00\x01\x02", durable=False)
            db[b"item"] = b"set"
            db.put(b"empty", b"")
            self.assertEqual(db.get(b"empty"), b"")  # present, empty: not None
            self.assertIn((b"empty", b""), db.walk())
            db.delete(b"empty")
            self.assertEqual(db.get(b"k"), b"v")
            self.assertEqual(db.get("text key"), b"text value")
            self.assertEqual(db[b"item"], b"set")
            self.assertIn(b"k", db)
            db.delete(b"k")
            db.delete(b"never there")  # succeeds
            self.assertIsNone(db.get(b"k"))
            self.assertEqual(db.get(b"k", b"default"), b"default")
            with self.assertRaises(KeyError):
                db[b"k"]
        with self.open() as db:
            self.assertEqual(db.get(b"zero\x00byte"), b"\x00\x01\x02")
            self.assertEqual(db.get("text key"), b"text value")
            self.assertIsNone(db.get(b"k"))
            self.assertEqual(db.stats()["live_keys"], 3)

    def test_a_checkpoint_on_request(self):
        with self.open(checkpoint_log_ratio=0, checkpoint_min_log_bytes=1 << 20) as db:
            db.put(b"k", b"v")
            self.assertEqual(db.stats()["checkpoints_written"], 0)
            db.checkpoint()
            self.assertEqual(db.stats()["checkpoints_written"], 1)
        with self.open(read_only=True) as db:
            self.assertEqual(db.get(b"k"), b"v")
            with self.assertRaises(nvkv.Error):
                db.checkpoint()
        # Every page reads: a degraded open is a plain one (unread_pages_test.cc tells the rest).
        with self.open(open_degraded=True) as db:
            self.assertEqual(db.get(b"k"), b"v")
            db.checkpoint()

    def test_a_batch_is_applied_whole(self):
        with self.open() as db:
            db.put(b"old", b"1")
            batch = nvkv.WriteBatch().put(b"a", b"A").put(b"b", b"B").delete(b"old")
            self.assertEqual(len(batch), 3)
            db.write(batch)
            self.assertEqual(db.multi_get([b"a", b"b", b"old", b"c"]), [b"A", b"B", None, None])
            batch.clear()
            self.assertEqual(len(batch), 0)

    def test_ordered_store_iterates_and_scans_in_key_order(self):
        with self.open(index_mode="ordered") as db:
            for key in [b"d", b"a", b"c", b"b"]:
                db.put(key, key.upper())
            self.assertEqual(list(db), [b"a", b"b", b"c", b"d"])
            self.assertEqual(db.items(), [(b"a", b"A"), (b"b", b"B"), (b"c", b"C"), (b"d", b"D")])
            self.assertEqual(db.items(start=b"b", end=b"d"), [(b"b", b"B"), (b"c", b"C")])
            self.assertEqual(db.items(start=b"b", limit=1), [(b"b", b"B")])
        # The store records its mode: a default open is ordered again.
        with self.open() as db:
            self.assertEqual(db.stats()["index_mode"], "ordered")
            self.assertEqual([k for k, _ in db.items()], [b"a", b"b", b"c", b"d"])

    def test_a_hash_store_is_walked_not_scanned(self):
        with self.open() as db:
            pairs = {f"key{i}".encode(): f"value{i}".encode() for i in range(50)}
            for key, value in pairs.items():
                db.put(key, value, durable=False)
            self.assertEqual(dict(db.walk()), pairs)
            with self.assertRaises(nvkv.Error) as raised:
                db.items()
            self.assertEqual(raised.exception.code, 9)
            self.assertEqual(raised.exception.code_name, "FAILED_PRECONDITION")

    def test_errors_carry_their_status_code(self):
        with self.assertRaises(nvkv.Error) as raised:
            nvkv.DB(self.path, create_if_missing=False)
        self.assertEqual(raised.exception.code_name, "NOT_FOUND")
        self.assertIn(self.path, raised.exception.message)
        with self.open() as db:
            with self.assertRaises(nvkv.Error) as raised:
                db.put(b"k" * 2000, b"v")  # longer than a key may be
            self.assertEqual(raised.exception.code_name, "INVALID_ARGUMENT")
            with self.assertRaises(nvkv.Error) as raised:
                db.put(b"big", b"x" * (db.max_value_bytes() + 1))
            self.assertEqual(raised.exception.code_name, "INVALID_ARGUMENT")
            # A second opener of the same store is refused while this one holds it.
            with self.assertRaises(nvkv.Error) as raised:
                nvkv.DB(self.path, lock_wait_ms=0)
            self.assertEqual(raised.exception.code_name, "FAILED_PRECONDITION")
        with self.assertRaises(TypeError):
            nvkv.DB(self.path, no_such_option=1)
        with self.assertRaises(TypeError):
            with self.open() as db:
                db.put(42, b"v")

    def test_readers_share_a_store_and_cannot_write(self):
        with self.open() as db:
            db.put(b"k", b"v")
        with nvkv.DB(self.path, read_only=True) as first, \
                nvkv.DB(self.path, read_only=True) as second:
            self.assertEqual(first.get(b"k"), b"v")
            self.assertEqual(second.get(b"k"), b"v")
            with self.assertRaises(nvkv.Error) as raised:
                first.put(b"k", b"new")
            self.assertEqual(raised.exception.code_name, "FAILED_PRECONDITION")
            with self.assertRaises(nvkv.Error) as raised:
                nvkv.DB(self.path, lock_wait_ms=0)  # no writer beside readers
            self.assertEqual(raised.exception.code_name, "FAILED_PRECONDITION")
        with self.open() as db:
            self.assertEqual(db.get(b"k"), b"v")

    def test_a_closed_store_refuses_calls(self):
        db = self.open()
        db.close()
        db.close()  # a second close does nothing
        with self.assertRaises(nvkv.Error) as raised:
            db.get(b"k")
        self.assertEqual(raised.exception.code_name, "FAILED_PRECONDITION")

    def test_version(self):
        self.assertRegex(nvkv.library_version(), r"^\d+\.\d+\.\d+$")


if __name__ == "__main__":
    unittest.main()
