"""Pinned behaviour: every shipped scenario, small, two seeds, against the
trace digest and summary it gave before the engine's speed-ups.

The simulator is made faster only by changes that leave every run as it
was: the same events in the same order, the same random draws, the same
summary. These constants were computed on the engine as it stood before that
work; a change of behaviour (intended or not) fails here, naming the run.
A change that is meant to alter runs updates the constants in the same commit
and says why. Every pinned run must also be clean (no invariant violated).

Changed on purpose since: catch-up-storm, link-flap, partition-heal and
secure-links, when a replica fetch's call deadline became its long poll plus
the call timeout (`link_rounds.fetch_deadline_ms`, the daemon's rule; the
storm's 60 s long polls had timed out every fetch at 10 s, so its link never
followed) and the follower's fetch silence bound its long poll plus 1.5 s
(`link_rounds.fetch_silence_ms`). The summaries (not the traces) of
mm2-connect-rebalance changed when it gained the flow's replication pauses
(`connect_replication_pause_ms_*`).
retention-outage and retention-outage-stop changed when retention became
Kafka's: whole segments (one second of records each, `segment_ms`), deleted
at a retention check every second (`retention_check_interval_ms`), the active
segment too once all of it is due, instead of batch by batch on every tick;
A now deletes a record 3 to 5 s after it was written instead of 3 s, and both
still record their gaps (`gap_records` 94 and 91; 325 and 327 in the stop
story) with no violation.

Each run is small: 8 virtual seconds, or for the two storm scenarios a few
partitions and a shortened outage, so the whole set stays quick.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from sim.runner import run_summary

SCENARIOS = Path(__file__).resolve().parent.parent / "sim" / "scenarios"
SMALL: dict[str, Any] = {"duration_ms": 8_000}
SIZED: dict[str, dict[str, Any]] = {
    "catch-up-storm": {"partitions": 20, "outage_ms": 600_000, "duration_ms": 1_800_000},
    "link-flap": {
        "partitions": 10,
        "outage_ms": 30_000,
        "duration_ms": 150_000,
        "disk_fractional_ms": True,
    },
    # Its own length: the stop, both resumes and the switch back all fall after 8 s.
    "retention-outage-stop": {"duration_ms": 20_000},
}

# (scenario, seed): (trace digest, sha256 of the summary as sorted JSON)
PINNED: dict[tuple[str, int], tuple[str, str]] = {
    ("add-empty-namespace", 1): (
        "85e6fd6ee5448be30b05821e0c10f354e01cf16d1ba6f71ca83fe5077900de1d",
        "9fcb31cedfc108c35add3b46354bfe1d85cfdb8702521a22ea24fc90f0843e38",
    ),
    ("add-empty-namespace", 2): (
        "792c684041cdde61329ef136247837b23c835aa1b0bfd6b2d118add569f6c5a7",
        "e3d4f2cec6f76032ac9b36bb8412abed4f22feff70c18cc148ed89619df52301",
    ),
    ("add-existing-topic", 1): (
        "66547dedbdb830f8504d5884522a7ff18246fe01c8bafb6227dcb052e6f2d92d",
        "c2cbaedd611aa209ccb0b464d754c751df19360b265260d829c6e344dacdd95f",
    ),
    ("add-existing-topic", 2): (
        "3bcdcb35ab058ece4e0ed12e63c2aa530d89596d59f56e2d8873233f6d8aabc1",
        "4851ac7b8f9afc5b6585def56fa5b3b200918b3007cc0c89dcce22a2f53832fc",
    ),
    ("catch-up-storm", 1): (
        "23850986f0064bf9dffb12788a3cdc2a1b22ce1bd5a4501febea5522415e0911",
        "93675c33063fe13b75d393ff5f5e599174c4abd5a577f3fe20f6e7995808c9a7",
    ),
    ("catch-up-storm", 2): (
        "196837450974671a656b7b300479d151e517e27e8ea45b88b846ddd18a4c1064",
        "f3566d4452e2565dd417cb41c0e5b2bc0bdb2becbedfed010ada40b68ca61114",
    ),
    ("compacted-follower", 1): (
        "aa869a8b6dd93efe250dc4ea9f87519b21d52b3eaa0bfaadfc6d788aa35f5853",
        "89d101ae3fac74f388587fa962200e8db3bb13229a3df2acfefc246698a79321",
    ),
    ("compacted-follower", 2): (
        "f1722521cc06e622fcd27d17217b98b2edf00ccedeafde81af46a685e21307f3",
        "ede40100ed058ecf284b67a1e1a34823b952ac88b3495c8725c2a40c968b08be",
    ),
    ("dr-multi-zone", 1): (
        "e246b490879319800decd1524c36d3bf2ec42fa2167661bdcaa1552d28e3e35a",
        "6478b6abd974dea2f3908fdf1d460193695057d4df2b7c80d27518a90f0a7539",
    ),
    ("dr-multi-zone", 2): (
        "d43f547b85c12c0f49447c1a089cc6c2bf96d9c96061c66a9f281e3980a80f4f",
        "eb4e078a700f104d046ced30067b6c977b1eacc5c0037b04d552cbef775a844d",
    ),
    ("dr-third-cluster", 1): (
        "cf85dc3f199cc463974f9b4a3721ad29746e3a9b7a99e3b3effa290c4240d011",
        "56e9a8f8804e429c7838804f0ef112abe48105ec847867586223486605c526f6",
    ),
    ("dr-third-cluster", 2): (
        "a36e566eb8817e6f89ca33dfce386c08ab731ce660f111e11670b4e544b64c63",
        "7ef1b4a85b91cc1786f63655e9f814a1e14642a4760fc92eb4f46babcdc4a2ce",
    ),
    ("failover-writable", 1): (
        "a8f41b76070ded9f88f83315206767fb1f95c73cbe082daab4e3d6cbb400eb57",
        "e6335035d83df932b839600f796364bcc427fbc3e509c853c91d8264c555fdd5",
    ),
    ("failover-writable", 2): (
        "0002f71183715ffe7d48265582f3df3e3b5d590bea92f0fcc668f8b18ccdec30",
        "dcd0d6d9fd0a130660f2358c6cdbf6d0cbafd5d49acec279efdeedfe26c6971d",
    ),
    ("link-flap", 1): (
        "bbb3c267556539445a97c4d656d80846732f58e378c66c48b84175ea572b867f",
        "2764af99d244d7ba4fc63ae6638b27f6aef55c0f21e605582ad3a3ee730fd3cb",
    ),
    ("link-flap", 2): (
        "2707fb0de6afd66466a1b17e53c4c48fc39520fbb4e608dc3056ecd9dee28d40",
        "7c1c4bd340a3ec3eca5892b94b5af1b19c2dba7de1cd8493ba1482be091ec273",
    ),
    ("mirror-vs-link-failover", 1): (
        "a5bd970ae3dd633ce4ff6bd6748e934a485ee033a2b3ff323344b828da5e0515",
        "5d268e376ac50fbd1a57a24dd73d1c82a37e2962b5e1489271ee3c8ebc54d732",
    ),
    ("mirror-vs-link-failover", 2): (
        "cf9bfbed24e0a86873bc172308759084cba0294dedeb590d00492a26c4128f77",
        "c38ce4f97fe86ecf352535f414b31d1b87a35f2dffe0290f30c5d8eeae19d264",
    ),
    ("mm2-connect-rebalance", 1): (
        "7fc53c14c94831e28a703aeabe6c661bace875595e9b56f49640c6ba7d56376f",
        "a1dc82e43c52939ce4adf1e2f1cd1df5c1ab7c6bea9151658e71e431dc27839a",
    ),
    ("mm2-connect-rebalance", 2): (
        "17a261bf51e41fe9447f4842f98d68ae914445a4d377bdbecc6a8315d55ccdd8",
        "586201085d6969871aa9d67770d767682616baef70aabee55db8baa5ac647dd2",
    ),
    ("operator-mix", 1): (
        "6468225e2b55a9f13ee06e3a3585ccddaf1aaf5a3351ebab7e30da030e7584ce",
        "4dfdcf3cabf810a5cb9a44e1ee7a4f3d57435a0482fb56680cd54e0a22888ae7",
    ),
    ("operator-mix", 2): (
        "5320515654dcbf0d121d3ccbb1b95b4839db817ebc01a0b0602ccfcf79706021",
        "a3bab311514924073ee3a3a9bd078f40bfe44b99b9cd65333fa7baad0454fe1f",
    ),
    ("partition-heal", 1): (
        "3831ac78c892c6176e7e59e80f35095fc04c236cb4773ab62585fd0d39e36dc9",
        "0e7cd681c6b76a2a32b319cae5087740be470cb3dbaefd7483b8bcffae112c60",
    ),
    ("partition-heal", 2): (
        "e258ade91be60e5b92e0a1ef94a959e6f7b0dbe88a2d2d95f2536257f0113f1e",
        "3623a876457b5e1beec7944dfe3c78d6eb6d972471c5e17642b9e01d7ad65983",
    ),
    ("retention-outage", 1): (
        "9cf11ee4ea9b7286b8df566e68ef6b93b7ebaf0995ce54bad015c30017c45e74",
        "fca248dc1b06e3eb21cfd58d9eaf4e161dee5445221e4dc814af6f811d700bbf",
    ),
    ("retention-outage", 2): (
        "55fd5cb9862c894994e10376a74c81bc6dee9b1f93bff8bbf5795cf72170cfa2",
        "5ceeac2dfa9b08ec5519592263d16cf84c174277c8f1200a414cdd65bf953d23",
    ),
    ("retention-outage-stop", 1): (
        "8b51493bb73989bba1843e0da2679d166783304e6de9dd2138781e96919c5fd3",
        "a9e69af53d6a81ddfd20ef4771cba651866c1202929b493517c6025ae74faf14",
    ),
    ("retention-outage-stop", 2): (
        "50ec4507f1df09579590f390ad522f380663ef76a11084b972ec3c8875e99e35",
        "26be0f11721e144d0b6660438712599bdeaf7a5c15233aa72549c1a9b1910e10",
    ),
    ("secure-links", 1): (
        "5c1431d9afa8c5ab51aec3c8648c5b4f02aa94093a4b556aa8d5095c6b0ee01a",
        "8669f77cb47052c2a5de00289ddf57cbe9c48f9a6cb2673e152d5c58bf47fde4",
    ),
    ("secure-links", 2): (
        "3f4f49515013fedaef92516775d99b641547b4770eb8d2162edeb988f86d42d2",
        "e20346b0457ba781ba26287481f0fdbf9e6f458f84aa76cd269cb1a57eca3e36",
    ),
    ("sync-failover", 1): (
        "3fb3b5076d77e25b0765221bc4b431d96ebd044a101e1aa4c38863061d62f580",
        "e241702571739a60f4444a6b5df926821d20fd023d5b6d105eaac505a28c1b8b",
    ),
    ("sync-failover", 2): (
        "4a8f59105b6aacee5510dc7fa15a56173edaa2ed2e11dbc574c241e4c45840d6",
        "eca86152f96e4ba8b79bcf93bd1fe17e7ff3b15a98721c2f9679d587817fe763",
    ),
    ("sync-follower-stall", 1): (
        "78ecd62a6da8b07ddc47ba4c246f7cbf625330d1450121e5d7de6c11e2358a32",
        "8065ea82f995e6af44bb18f0a309b2c7184ddc1d4fc72142d38af6fb0d2b51bd",
    ),
    ("sync-follower-stall", 2): (
        "6b78e06a9970b35b372055fca5f7b55726d63c90d36f411bc4fd45a58a1417e7",
        "098e0dd404a5da9056a59983c64bdda9a610829031f6770472ec2dbe766e27fe",
    ),
    ("unclean-election", 1): (
        "afb611937c69780ccfc0a5ed1d878ecc5e1fff8504b793a1c01b054e44ae77b8",
        "8fc8da25e6214febf0a6dee2df937472fc4c1da6dc8cc756f7e96e7615c06eff",
    ),
    ("unclean-election", 2): (
        "20a1f158c10cb615cf2e5fc533a1f9facddcbd8d625f22ebf51e46f29bf5aa97",
        "ef74d3851fffb6dfcb0799dea1a70d5714bd8cc9161f5ac0f7ebf26ff2ed659d",
    ),
}


def test_every_shipped_scenario_is_pinned() -> None:
    shipped = {p.stem for p in SCENARIOS.glob("*.toml")}
    assert {name for name, _seed in PINNED} == shipped


@pytest.mark.parametrize(("scenario", "seed"), sorted(PINNED))
def test_run_matches_its_pinned_digest(scenario: str, seed: int) -> None:
    summary = run_summary(scenario, seed, dict(SIZED.get(scenario, SMALL)))
    # A pinned run is a clean one: pinning a run that breaks an invariant
    # would hold the bug in place (the storm's long polls once outlived their
    # fetch calls, so its link never followed, and the pin kept that).
    assert summary["violations"] == [], f"{scenario} seed {seed}: {summary['violations']}"
    digest, summary_sha = PINNED[(scenario, seed)]
    assert summary["trace_digest"] == digest, f"{scenario} seed {seed}: the trace changed"
    text = json.dumps(summary, sort_keys=True).encode()
    assert hashlib.sha256(text).hexdigest() == summary_sha, (
        f"{scenario} seed {seed}: same trace, but the summary changed: {summary['metrics']}"
    )
