"""Pinned behaviour: every shipped scenario, small, two seeds, against the
trace digest and summary it gave before the engine's speed-ups.

The simulator is made faster only by changes that leave every run as it
was: the same events in the same order, the same random draws, the same
summary. These constants were computed on the engine as it stood before that
work; a change of behaviour (intended or not) fails here, naming the run.
A change that is meant to alter runs updates the constants in the same commit
and says why.

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
        "42bf12c476d2e7fb0dd507aa531838f42786c3e30e93b1602457d4444b1e0425",
        "fa344a9216740b5e8631b3546689e8b72a127423c4e912db15bcf9f3c83e149e",
    ),
    ("catch-up-storm", 2): (
        "6fb8d5866fa9455c7f778bde39b477d5f329d07cfa46d0819962dbd95f52207f",
        "c058ed6f56421aeee92f6389c6396d433259cde7961356a808b897dee9baa0d2",
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
        "b3db47b5f9844e62221c2a21d0aa3836cee0606a91a48419a83e7c9c663b3f50",
        "0ce274da17d5f103d8630d0a8e1d04762a2c24ff71ab97a8fd1763bae748c44c",
    ),
    ("link-flap", 2): (
        "db5cc4601ba7caaecd048df9a2a472e1bcf1375a32c4110982ac1f2743dc8f4e",
        "907ab462f2fa6dccfc0ec436020523ba9fbb9b93ee0386392fdcb095d6c7aad3",
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
        "b8bf68482b4f9556658841c95642c9c401498d8aa483cff14cfb1962c6492b24",
    ),
    ("mm2-connect-rebalance", 2): (
        "17a261bf51e41fe9447f4842f98d68ae914445a4d377bdbecc6a8315d55ccdd8",
        "fa8a1363cdf4b722ee7d71371b925f019dc9006314e55c4fa7d1bc9a45448b91",
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
        "d98d21c824af9cb58cb3f382d79d78518e105509c0aeb18a515736435ce87c7e",
        "ac6953036225a37515c0015d71113d841d35f5047ecd4db2cc896c45a314971a",
    ),
    ("partition-heal", 2): (
        "a7b92cbc065b253833b0fa1f27cd6520e406127c45ce79507d5afa52fb726731",
        "b21be24c841bac51afd307fb4f6e2c87d63aec4f85b4f94ed890da4ef2c4000a",
    ),
    ("retention-outage", 1): (
        "f4623a9c3f5d13e3e3a6ba304eb751d7d6345416b6a074a096b9a34d19079610",
        "a830e4d9f34056d25f01aecf096558b03a104fe9f01dd503d5d1e76cc518e90e",
    ),
    ("retention-outage", 2): (
        "c7ebfa4191a4ae86faee545a57ffdef12b8564b30f8640fa4f4fa8301e53dc47",
        "d98505281a8597b148bfdbbe696b7c8394ca011eb7e6344e094e707f5a4bb670",
    ),
    ("secure-links", 1): (
        "6efa6845c2bc0c85346e13bde5adbc760d5d8bac1f73f8fe70fe2ef21180507f",
        "21ce49685a4fd5213aab9cf42e7c3478d5750c2edeef2f594aaef0abe70f3e26",
    ),
    ("secure-links", 2): (
        "1cffd77fc3dfaf904fb7aae7664699f702f2e7a9462da323cba2d986f9bb54c9",
        "0cdb39f9089617bf7c2fc6a8af4a68daf66a1510f17101ea6667da43b769dfea",
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
    digest, summary_sha = PINNED[(scenario, seed)]
    assert summary["trace_digest"] == digest, f"{scenario} seed {seed}: the trace changed"
    text = json.dumps(summary, sort_keys=True).encode()
    assert hashlib.sha256(text).hexdigest() == summary_sha, (
        f"{scenario} seed {seed}: same trace, but the summary changed: {summary['metrics']}"
    )
