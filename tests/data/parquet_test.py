"""Parquet corpora through Apache Arrow's reader (ctest `data_parquet`, built when the build has
Parquet support): shards written here with pyarrow in the layouts and codecs real datasets use
(snappy, zstd, gzip, none; several row groups; large_string; null rows; the Hugging Face folder
data/train-0000N-of-0000M.parquet) must give `cart data prepare` exactly the tokens the same
documents give as JSON Lines; broken files are refused naming the file and the problem.

    parquet_test.py BIN_DIR OUT_DIR   (run with the Python of deploy/install-python.sh)"""

import json
import os
import shutil
import subprocess
import sys
import unittest

import pyarrow as pa
import pyarrow.parquet as pq

BIN, OUT = sys.argv[1], sys.argv[2]
CART = os.path.join(BIN, "cart")

# Real English with the awkward parts: non-ASCII, empty documents, a long one, markup.
DOCS = [
    "The quick brown fox jumps over the lazy dog.",
    "Zürich, São Paulo and Kraków — naïve café résumé ½ € ✓.",
    "",
    "Line one\nLine two\n\n\tindented <b>markup</b> & entities &amp;",
    "Once upon a time there was a little robot. " * 400,
] + [f"Document number {i}: the spectral radius of the core is {0.5 + i / 1000:.3f}." for i in range(300)]


def cart(*args, check=True):
    done = subprocess.run([CART, *args], capture_output=True, text=True)
    if check and done.returncode != 0:
        raise AssertionError(f"cart {' '.join(args)} failed: {done.stderr}")
    return done


def tokens(path):
    with open(path, "rb") as f:
        return f.read()


class ParquetPrepareTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        shutil.rmtree(OUT, ignore_errors=True)
        os.makedirs(OUT)
        cls.jsonl = os.path.join(OUT, "docs.jsonl")
        with open(cls.jsonl, "w", encoding="utf-8") as f:
            for d in DOCS:
                f.write(json.dumps({"id": 0, "text": d}) + "\n")
        cart("data", "prepare", cls.jsonl, "--out", os.path.join(OUT, "from_jsonl.bin"),
             "--threads", "2")
        cls.expected = tokens(os.path.join(OUT, "from_jsonl.bin"))

    def prepare(self, *inputs, name, extra=()):
        out = os.path.join(OUT, name + ".bin")
        cart("data", "prepare", *inputs, "--out", out, "--threads", "2", *extra)
        return tokens(out)

    def table(self, docs, string_type=pa.string(), nulls=False):
        texts = list(docs)
        if nulls:  # null rows between documents are skipped
            texts = [t for d in texts for t in (d, None)]
        return pa.table({"id": pa.array(range(len(texts)), pa.int64()),
                         "text": pa.array(texts, string_type),
                         "url": pa.array(["https://example.org"] * len(texts))})

    def test_every_codec_and_row_group_size_gives_the_tokens_of_the_jsonl(self):
        for codec in ("snappy", "zstd", "gzip", "none"):
            for rows in (7, 1000):
                path = os.path.join(OUT, f"docs-{codec}-{rows}.parquet")
                pq.write_table(self.table(DOCS), path, compression=codec, row_group_size=rows)
                got = self.prepare(path, name=f"{codec}-{rows}")
                self.assertEqual(got, self.expected, f"{codec}, row groups of {rows}")
        self.assertGreater(pq.ParquetFile(os.path.join(OUT, "docs-zstd-7.parquet"))
                           .num_row_groups, 40)

    def test_large_strings_nulls_and_a_renamed_column(self):
        path = os.path.join(OUT, "large.parquet")
        pq.write_table(self.table(DOCS, pa.large_string(), nulls=True), path)
        self.assertEqual(self.prepare(path, name="large"), self.expected)
        renamed = self.table(DOCS).rename_columns(["id", "content", "url"])
        path = os.path.join(OUT, "content.parquet")
        pq.write_table(renamed, path)
        self.assertEqual(self.prepare(path, name="content", extra=("--text-field", "content")),
                         self.expected)

    def test_a_hugging_face_folder_of_shards_reads_in_shard_order(self):
        folder = os.path.join(OUT, "wikipedia", "data")
        os.makedirs(folder, exist_ok=True)
        shards = [DOCS[:2], DOCS[2:100], DOCS[100:]]
        for i, part in reversed(list(enumerate(shards))):  # written out of order on purpose
            pq.write_table(self.table(part), os.path.join(
                folder, f"train-{i:05d}-of-{len(shards):05d}.parquet"), compression="snappy")
        with open(os.path.join(OUT, "wikipedia", "README.md"), "w") as f:
            f.write("dataset card, not a shard")
        self.assertEqual(self.prepare(os.path.join(OUT, "wikipedia"), name="folder"),
                         self.expected)
        # The same shards named one by one, and mixed with other formats in one prepare.
        files = sorted(os.path.join(folder, f) for f in os.listdir(folder))
        self.assertEqual(self.prepare(*files, name="shards"), self.expected)
        head = os.path.join(OUT, "head.jsonl")
        with open(head, "w", encoding="utf-8") as f:
            for d in DOCS[:2]:
                f.write(json.dumps({"text": d}) + "\n")
        self.assertEqual(self.prepare(head, files[1], files[2], name="mixed"), self.expected)
        info = json.loads(cart("data", "info", os.path.join(OUT, "folder.bin"), "--json").stdout)
        self.assertTrue(any("(parquet)" in s for s in info["sources"]), info["sources"])

    def test_the_mixture_in_one_command_with_caps_and_its_dry_run(self):
        folder = os.path.join(OUT, "mixsrc", "data")
        os.makedirs(folder, exist_ok=True)
        pq.write_table(self.table(DOCS), os.path.join(folder, "train-00000-of-00001.parquet"))
        args = ["data", "prepare", "--out", os.path.join(OUT, "mix.bin"),
                "--source", f"tiny={self.jsonl}", "--weight", "tiny=3",
                "--source", f"wiki={os.path.join(OUT, 'mixsrc')}", "--weight", "wiki=2",
                "--max-tokens", "wiki=5k", "--chunk-tokens", "64"]
        plan = cart(*args, "--dry-run").stdout
        self.assertIn("wiki    2       1", plan)
        self.assertFalse(os.path.exists(os.path.join(OUT, "mix.bin")), "a dry run writes nothing")
        done = cart(*args).stdout
        meta = {n: json.load(open(os.path.join(OUT, f"mix.{n}.json"))) for n in ("tiny", "wiki")}
        self.assertEqual(meta["wiki"]["tokens"], 5000)
        self.assertEqual(tokens(os.path.join(OUT, "mix.tiny.bin")), self.expected)
        mix = json.load(open(os.path.join(OUT, "mix.json")))
        # Whole cycles of 3 + 2 chunks: wiki's 5,000 tokens give 39 cycles of its 2 chunks.
        self.assertEqual(mix["tokens"], (5000 // (2 * 64)) * 5 * 64)
        self.assertIn(f"{mix['tokens']:,} tokens in chunks of 64", plan)  # the dry run was exact
        self.assertIn("(stopped at its --max-tokens)", done)
        bad = cart("data", "prepare", "--out", os.path.join(OUT, "x.bin"), "--source",
                   f"a={self.jsonl}", "--max-tokens", "a=12Q", check=False)
        self.assertIn("--max-tokens a: '12Q' is not a count", bad.stderr)
        bad = cart("data", "prepare", "--out", os.path.join(OUT, "x.bin"), "--source",
                   f"a={self.jsonl}", "--weight", "b=2", check=False)
        self.assertIn("no --source named 'b'", bad.stderr)

    def test_broken_files_are_refused_naming_the_file_and_the_problem(self):
        good = os.path.join(OUT, "good.parquet")
        pq.write_table(self.table(DOCS), good, compression="zstd")
        with open(good, "rb") as f:
            data = f.read()
        truncated = os.path.join(OUT, "truncated.parquet")
        with open(truncated, "wb") as f:
            f.write(data[: len(data) // 2])
        done = cart("data", "prepare", truncated, "--out", os.path.join(OUT, "t.bin"), check=False)
        self.assertEqual(done.returncode, 2, done.stderr)
        self.assertIn("truncated.parquet", done.stderr)
        self.assertIn("not a Parquet file, or truncated", done.stderr)
        self.assertFalse(os.path.exists(os.path.join(OUT, "t.bin")))
        # The text column's first page header corrupted (the footer intact): refused, named.
        chunk = pq.ParquetFile(good).metadata.row_group(0).column(1)
        self.assertEqual(chunk.path_in_schema, "text")
        start = chunk.dictionary_page_offset or chunk.data_page_offset
        corrupt = os.path.join(OUT, "corrupt.parquet")
        middle = bytearray(data)
        for i in range(start, start + 64):
            middle[i] ^= 0x5A
        with open(corrupt, "wb") as f:
            f.write(middle)
        done = cart("data", "prepare", corrupt, "--out", os.path.join(OUT, "c.bin"), check=False)
        self.assertEqual(done.returncode, 2, done.stderr)
        self.assertIn("corrupt.parquet: row group 0:", done.stderr)
        self.assertFalse(os.path.exists(os.path.join(OUT, "c.bin")))
        done = cart("data", "prepare", good, "--text-field", "body",
                    "--out", os.path.join(OUT, "b.bin"), check=False)
        self.assertIn("no column 'body' (columns: id, text, url", done.stderr)
        done = cart("data", "prepare", good, "--text-field", "id",
                    "--out", os.path.join(OUT, "i.bin"), check=False)
        self.assertIn("column 'id' holds int64, not text", done.stderr)
        empty = os.path.join(OUT, "empty-folder")
        os.makedirs(empty, exist_ok=True)
        done = cart("data", "prepare", empty, "--out", os.path.join(OUT, "e.bin"), check=False)
        self.assertIn("no .parquet file", done.stderr)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])
