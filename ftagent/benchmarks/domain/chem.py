"""RDKit helpers for ChemCoTBench (RDKit imported lazily; every function is safe on bad SMILES).

Functional-group SMARTS are our own patterns for the ~20 group names the benchmark uses.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

GROUP_SMARTS = {
    "benzene": "c1ccccc1",
    "hydroxyl": "[OX2H][#6;!$(C=O)]",
    "aldehyde": "[CX3H1](=O)[#6,#1]",
    "ketone": "[#6][CX3](=O)[#6]",
    "carboxyl": "[CX3](=O)[OX2H1]",
    "ester": "[#6][CX3](=O)[OX2H0][#6]",
    "anhydride": "[CX3](=O)[OX2][CX3](=O)",
    "amine": "[NX3;!$(N-C=[O,S,N]);!$(N-S(=O)=O);!$(N-[N,O]);!$(N-a:n)]",
    "amide": "[NX3][CX3](=[OX1])",
    "nitro": "[$([NX3](=O)=O),$([NX3+](=O)[O-])]",
    "halo": "[F,Cl,Br,I]",
    "thiol": "[SX2H]",
    "thioether": "[#6][SX2][#6]",
    "sulfide": "[#6][SX2][#6]",
    "disulfide": "[SX2][SX2]",
    "sulfoxide": "[#6][SX3](=O)[#6]",
    "sulfone": "[#6][SX4](=O)(=O)[#6]",
    "nitrile": "[CX2]#[NX1]",
    "borane": "[BX3]",
    "ether": "[OD2;!$(OC=O)]([#6])[#6]",
    "alkene": "[CX3]=[CX3]",
    "alkyne": "[CX2]#[CX2]",
}
_ALIASES = {"benzene_ring": "benzene", "phenyl": "benzene", "hydroxy": "hydroxyl", "alcohol": "hydroxyl",
            "carboxylic_acid": "carboxyl", "halogen": "halo", "halide": "halo", "cyano": "nitrile",
            "amino": "amine", "sulfhydryl": "thiol"}


@functools.lru_cache(maxsize=1)
def _rdkit() -> Any:
    try:
        from rdkit import Chem, RDLogger  # noqa: PLC0415 - optional dependency

        RDLogger.DisableLog("rdApp.*")
        return Chem
    except ImportError:
        return None


def available() -> bool:
    """Whether RDKit can be imported."""
    return _rdkit() is not None


def missing_reason() -> str:
    """Why chemistry metrics are not computed."""
    return "RDKit is not installed (pip install rdkit)"


def mol(smiles: str | None) -> Any:
    """An RDKit molecule, or ``None`` for empty/invalid SMILES (or without RDKit)."""
    Chem = _rdkit()
    if Chem is None or not smiles or not isinstance(smiles, str):
        return None
    try:
        return Chem.MolFromSmiles(smiles.strip())
    except Exception:  # noqa: BLE001 - RDKit raises several types on odd input
        return None


def canonical(smiles: str | None) -> str | None:
    """Canonical SMILES, or ``None`` when invalid."""
    m = mol(smiles)
    return None if m is None else _rdkit().MolToSmiles(m)


def same_molecule(a: str | None, b: str | None) -> bool:
    """Both parse and have the same InChI (canonical SMILES when InChI is unavailable)."""
    ma, mb = mol(a), mol(b)
    if ma is None or mb is None:
        return False
    Chem = _rdkit()
    try:
        ia, ib = Chem.MolToInchi(ma), Chem.MolToInchi(mb)
        if ia and ib:
            return ia == ib
    except Exception:  # noqa: BLE001
        pass
    return Chem.MolToSmiles(ma) == Chem.MolToSmiles(mb)


def tanimoto(a: str | None, b: str | None, radius: int = 2, n_bits: int = 2048) -> float:
    """Tanimoto similarity of Morgan bit fingerprints (0.0 when either is invalid)."""
    ma, mb = mol(a), mol(b)
    if ma is None or mb is None:
        return 0.0
    from rdkit import DataStructs  # noqa: PLC0415
    from rdkit.Chem import rdFingerprintGenerator  # noqa: PLC0415

    gen = rdFingerprintGenerator.GetMorganGenerator(radius=radius, fpSize=n_bits)
    return float(DataStructs.TanimotoSimilarity(gen.GetFingerprint(ma), gen.GetFingerprint(mb)))


def group_key(name: str | None) -> str | None:
    """Normalise a group name ("Benzene ring" → "benzene"); ``None`` if not in the table."""
    if not name:
        return None
    key = str(name).strip().lower().replace("-", "_").replace(" ", "_")
    key = key.removesuffix("_group")
    key = _ALIASES.get(key, key)
    return key if key in GROUP_SMARTS else None


def group_count(smiles: str | None, group: str | None) -> int | None:
    """Number of matches of ``group``'s SMARTS in ``smiles`` (``None`` if invalid/unknown)."""
    m, key = mol(smiles), group_key(group)
    if m is None or key is None:
        return None
    patt = _rdkit().MolFromSmarts(GROUP_SMARTS[key])
    return len(m.GetSubstructMatches(patt))


def edit_correct(subtask: str, source: str | None, target: str | None, group_a: str | None,
                 group_b: str | None = None) -> bool:
    """add: count(a) +1; delete: count(a) −1; sub: count(b) −1 and count(a) +1 (a = added group)."""
    if mol(source) is None or mol(target) is None:
        return False
    ca_s, ca_t = group_count(source, group_a), group_count(target, group_a)
    if ca_s is None or ca_t is None:
        return False
    if subtask == "add":
        return ca_t == ca_s + 1
    if subtask == "delete":
        return ca_t == ca_s - 1
    cb_s, cb_t = group_count(source, group_b), group_count(target, group_b)
    return cb_s is not None and cb_t is not None and cb_t == cb_s - 1 and ca_t == ca_s + 1


def esol(smiles: str) -> float | None:
    """ESOL log-solubility refit for RDKit descriptors (higher = more soluble)."""
    m = mol(smiles)
    if m is None:
        return None
    from rdkit.Chem import Crippen, Descriptors, Lipinski  # noqa: PLC0415

    heavy = m.GetNumHeavyAtoms() or 1
    aromatic = sum(a.GetIsAromatic() for a in m.GetAtoms()) / heavy
    return (0.26121 - 0.74167 * Crippen.MolLogP(m) - 0.0066139 * Descriptors.MolWt(m)
            + 0.0034515 * Lipinski.NumRotatableBonds(m) - 0.42625 * aromatic)


def _logp(smiles: str) -> float | None:
    m = mol(smiles)
    if m is None:
        return None
    from rdkit.Chem import Crippen  # noqa: PLC0415

    return float(Crippen.MolLogP(m))


def _qed(smiles: str) -> float | None:
    m = mol(smiles)
    if m is None:
        return None
    from rdkit.Chem import QED  # noqa: PLC0415

    return float(QED.qed(m))


def property_oracle(subtask: str) -> Callable[[str], float | None] | None:
    """An offline oracle for ``logp``/``qed``/``solubility``; ``None`` for drd/gsk/jnk."""
    return {"logp": _logp, "qed": _qed, "solubility": esol}.get(subtask)


def scaffold_similarity(a: str, b: str) -> tuple[bool, float]:
    """(identical Murcko scaffolds, soft score): soft is 1.0 when identical, else the Morgan (r2,
    1024 bits) Tanimoto of the two scaffolds (0.0 when a scaffold is empty)."""
    from rdkit.Chem.Scaffolds import MurckoScaffold  # noqa: PLC0415

    try:
        sa = MurckoScaffold.MurckoScaffoldSmiles(mol=mol(a))
        sb = MurckoScaffold.MurckoScaffoldSmiles(mol=mol(b))
    except Exception:  # noqa: BLE001
        return False, 0.0
    if sa == sb:
        return True, 1.0
    if not sa or not sb:
        return False, 0.0
    return False, tanimoto(sa, sb, radius=2, n_bits=1024)
