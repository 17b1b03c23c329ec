"""``specband probe --url URL``: read a running sglang or vLLM server, write a probe file and
print what its config gives and what the best config would give (simulated)."""

from __future__ import annotations

import typer

from specband.cli.answer_table import print_answer_table
from specband.cli.output import note, say
from specband.cli.params import request_command
from specband.deploy.probe import ProbeOutcome, ProbeRequest


def register(app: typer.Typer) -> None:
    """Add ``probe`` to ``app``."""
    app.command("probe")(probe_command)


@request_command(ProbeRequest)
def probe_command(request: ProbeRequest) -> None:
    """Read a running sglang or vLLM server (its speculative flags, acceptance and batch sizes, and
    the GPU's power through NVML when the server is local), write them to a probe file for
    --acceptance-from, and print what its config gives and what the best config per batch size
    would give (simulated). Sends at most --max-requests short requests and never changes the server."""
    from specband.deploy.probe import run_probe  # lazy: off the cold path (recommend, --help)

    outcome = run_probe(request)
    _print_reading(outcome)
    _print_simulation(outcome, request.explain)


def _print_reading(outcome: ProbeOutcome) -> None:
    r = outcome.reading
    engine = r.engine.name if r.engine_version is None else f"{r.engine.name} {r.engine_version}"
    say(f"{r.url}: {engine}, target {r.target or 'not reported'}, draft {r.draft or 'not reported'}")
    flags = ", ".join(f"{k}={v}" for k, v in r.flags.items() if v is not None)
    say(f"config ({outcome.provenance}): action {tuple(r.action)}" + (f" ({flags})" if flags else ""))
    a = r.acceptance
    if a is None:
        say("acceptance: none (plain decoding, or no draft ran and no request was sent)")
    else:
        behind = f", {a.verify_steps} verify steps" if a.verify_steps is not None else ""
        pos = "" if a.position_accept is None else ", per position " + " ".join(f"{p:.2f}" for p in a.position_accept)
        say(f"acceptance ({outcome.provenance}, {a.source}): accept length {a.accept_length:.3f}{behind}{pos}")
    sizes = ", ".join(map(str, r.batch_sizes_seen)) or "none seen"
    say(f"batch sizes ({outcome.provenance}): {sizes} [{r.batch_size_source}]")
    p = outcome.power
    if p is None:
        say(f"power: none ({outcome.power_note})")
    else:
        say(f"power (measured, NVML, {p.gpu}): {p.power_w} W at a limit of {p.power_limit_w} W")
    say(f"requests sent: {r.requests_sent} (at most {outcome.max_requests})")
    for line in r.notes:
        note(line)
    say(f"wrote {outcome.path}", err=True)


def _print_simulation(outcome: ProbeOutcome, explain: bool) -> None:
    sim = outcome.simulation
    if sim is None:
        if outcome.simulation_note:
            note(outcome.simulation_note)
        return
    say("")
    say(
        f"SIMULATED on {sim.profile} ({sim.hardware}), not measured; acceptance {sim.acceptance}; limit now "
        f"{sim.current_limit_w:g} W ({sim.limit_source}); rows 'now': the server's config at that limit"
    )
    for line in sim.residuals:
        say(f"  acceptance fit: {line}")
    print_answer_table(sim.table, explain=explain, table_err=False)
