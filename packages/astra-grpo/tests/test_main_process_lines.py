"""Under `accelerate launch` every process runs the command: its closing lines come from the main process only."""

from astra_grpo import cli


def test_closing_line_from_rank_0_only(monkeypatch, capsys):
    for rank, shown in (("0", True), ("1", False)):
        monkeypatch.setenv("RANK", rank)
        cli._say_main("astra-grpo sft: weights in out/final")
        assert ("weights in out/final" in capsys.readouterr().err) is shown
    monkeypatch.delenv("RANK")  # one process, not launched: it is the main process
    cli._say_main("astra-grpo train: weights in out/final")
    assert "weights in out/final" in capsys.readouterr().err
