"""Stage output as parquet (`-o FILE.parquet`, the `parquet` extra: pyarrow)."""

import orjson
import pyarrow.parquet as pq
import pytest
from astra_core.stage import Stage, StageOptions


def write_input(path, n):
    path.write_bytes(b"".join(orjson.dumps({"id": f"r{i}", "meta": {}, "value": i}) + b"\n" for i in range(n)))
    return str(path)


def test_a_parquet_output_is_written_at_the_end_and_is_no_file_at_all_when_the_run_fails(tmp_path):
    inp = write_input(tmp_path / "in.jsonl", 3)
    out = tmp_path / "out.parquet"
    with Stage("test", StageOptions(inputs=(inp,), output=str(out))) as stage:
        stage.run(lambda record: record)
    assert pq.read_table(out).column("id").to_pylist() == ["r0", "r1", "r2"]

    failed = tmp_path / "failed.parquet"

    def fails(record):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        with Stage("test", StageOptions(inputs=(inp,), output=str(failed))) as stage:
            assert failed.exists()  # claimed (locked) while the stage runs
            stage.run(fails)
    assert not failed.exists()  # not an empty file that no parquet reader opens
