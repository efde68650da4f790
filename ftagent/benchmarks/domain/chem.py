"""RDKit helpers for ChemCoTBench (RDKit imported lazily; every function is safe on bad SMILES).

Functional-group SMARTS are the benchmark's own table (``GROUP_TO_SMARTS`` and ``mol_prop`` in
IDEA-XL/ChemCoTBench ``baseline_and_eval/eval/eval_moledit.py`` @ ac04f91): the edit checks count
matches of exactly these patterns, so a different pattern gives a different verdict on the same
molecule.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any

GROUP_SMARTS = {
    "benzene": "[cR1]1[cR1][cR1][cR1][cR1][cR1]1",
    "benzene_ring": "[cR1]1[cR1][cR1][cR1][cR1][cR1]1",
    "hydroxyl": "[OX2H]",  # phenol, alcohol and the OH of carboxylic acids alike
    "aldehyde": "[CX3H1](=O)[#6]",
    "ketone": "[#6][CX3](=O)[#6]",
    "carboxyl": "[CX3](=O)[OX2H1]",
    "ester": "[#6][CX3](=O)[OX2H0][#6]",
    "anhydride": "[CX3](=[OX1])[OX2][CX3](=[OX1])",
    "amine": "[NX3;H2,H1;!$(NC=O)]",
    "amide": "[NX3][CX3](=[OX1])[#6]",
    "nitro": "[$([NX3](=O)=O),$([NX3+](=O)[O-])][!#8]",
    "halo": "[F,Cl,Br,I]",
    "thiol": "[#16X2H]",
    "thioether": "[SX2][CX4]",
    "disulfide": "[#16X2H0][#16X2H0]",
    "sulfoxide": "[$([#16X3]=[OX1]),$([#16X3+][OX1-])]",
    "sulfone": "[$([#16X4](=[OX1])=[OX1]),$([#16X4+2]([OX1-])[OX1-])]",
    "sulfide": "[#16X2H0]",  # minus the disulfide matches (see group_count)
    "nitrile": "[NX1]#[CX2]",
    "borane": "[BX3]",
}
_ALIASES = {"phenyl": "benzene", "hydroxy": "hydroxyl", "alcohol": "hydroxyl",
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


def canonical(smiles: str | None, isomeric: bool = True) -> str | None:
    """Canonical SMILES (without stereo marks when ``isomeric=False``), or ``None`` when invalid."""
    m = mol(smiles)
    return None if m is None else _rdkit().MolToSmiles(m, isomericSmiles=isomeric)


def same_molecule(a: str | None, b: str | None, isomeric: bool = True) -> bool:
    """Both parse and have the same InChI (canonical SMILES when InChI is unavailable).

    ``isomeric=False`` compares the molecules without stereochemistry, as the benchmark's reaction
    scorer does (it canonicalises with ``isomericSmiles=False`` before taking the InChI).
    """
    if not isomeric:
        a, b = canonical(a, isomeric=False), canonical(b, isomeric=False)
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
    Chem = _rdkit()
    count = len(m.GetSubstructMatches(Chem.MolFromSmarts(GROUP_SMARTS[key])))
    if key == "sulfide":  # the benchmark's sulfide count excludes disulfide S-S pairs
        count -= len(m.GetSubstructMatches(Chem.MolFromSmarts(GROUP_SMARTS["disulfide"])))
    return count


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

    aromatic = sum(a.GetIsAromatic() for a in m.GetAtoms()) / (m.GetNumAtoms() or 1)
    return (0.26121 - 0.74167 * Crippen.MolLogP(m) - 0.0066139 * Descriptors.MolWt(m)
            + 0.0034515 * Lipinski.NumRotatableBonds(m) - 0.42625 * aromatic)


# ZINC-250k normalisation constants of penalised logP (PyTDC ``penalized_logp``, the benchmark's
# ``Oracle(name="logp")``).
_PLOGP = {"logp": (2.4570953396190123, 1.434324401111988), "sa": (-3.0525811293166134, 0.8335207024513095),
          "cycle": (-0.0485696876403053, 0.2860212110245455)}


@functools.lru_cache(maxsize=1)
def _sascorer() -> Any:
    """RDKit's Contrib SA_Score module (Ertl & Schuffenhauer; shipped in the rdkit wheel)."""
    from rdkit.Chem import RDConfig  # noqa: PLC0415

    path = os.path.join(RDConfig.RDContribDir, "SA_Score")
    if path not in sys.path:
        sys.path.append(path)
    import sascorer  # noqa: PLC0415 - lives in RDKit's Contrib folder

    return sascorer


def _largest_cycle(m: Any) -> int:
    """Largest cycle of the molecule's cycle basis (networkx, as PyTDC); RDKit's SSSR without it."""
    try:
        import networkx as nx  # noqa: PLC0415 - optional; torch brings it into the tool env
    except ImportError:
        return max((len(r) for r in m.GetRingInfo().AtomRings()), default=0)
    cycles = nx.cycle_basis(nx.Graph(_rdkit().rdmolops.GetAdjacencyMatrix(m)))
    return max((len(c) for c in cycles), default=0)


def penalized_logp(smiles: str | None) -> float | None:
    """Penalised logP as PyTDC computes it: z-scored Crippen logP − SA score − (largest ring − 6)."""
    m = mol(smiles)
    if m is None:
        return None
    from rdkit.Chem import Descriptors  # noqa: PLC0415

    parts = {"logp": Descriptors.MolLogP(m), "sa": -_sascorer().calculateScore(m),
             "cycle": -max(_largest_cycle(m) - 6, 0)}
    return float(sum((value - _PLOGP[k][0]) / _PLOGP[k][1] for k, value in parts.items()))


def _qed(smiles: str) -> float | None:
    m = mol(smiles)
    if m is None:
        return None
    from rdkit.Chem import QED  # noqa: PLC0415

    return float(QED.qed(m))


def property_oracle(subtask: str) -> Callable[[str], float | None] | None:
    """An offline oracle for ``logp`` (penalised logP, as PyTDC's ``logp``), ``qed`` and ``solubility``
    (ESOL); ``None`` for drd/gsk/jnk (PyTDC classifiers whose model files are downloads)."""
    return {"logp": penalized_logp, "qed": _qed, "solubility": esol}.get(subtask)


def scaffold_similarity(a: str, b: str) -> tuple[bool, float]:
    """(identical Murcko scaffolds, soft score) as the benchmark's ``scaffold_consistency``: soft is
    1.0 when identical, else the Morgan (r2, 1024 bits) Tanimoto of the two scaffolds when they share
    a maximum common substructure, else 0.0 (also when a scaffold is empty)."""
    from rdkit.Chem import rdFMCS  # noqa: PLC0415
    from rdkit.Chem.Scaffolds import MurckoScaffold  # noqa: PLC0415

    try:
        sa = MurckoScaffold.MurckoScaffoldSmiles(mol=mol(a))
        sb = MurckoScaffold.MurckoScaffoldSmiles(mol=mol(b))
    except Exception:  # noqa: BLE001
        return False, 0.0
    if sa == sb:
        return True, 1.0
    if not sa or not sb or rdFMCS.FindMCS([mol(sa), mol(sb)]).numAtoms == 0:
        return False, 0.0
    return False, tanimoto(sa, sb, radius=2, n_bits=1024)


def molecule_key(smiles: str | None) -> str | None:
    """What two molecules share when the reaction scorer calls them the same: the InChI of the
    non-isomeric canonical SMILES (that SMILES when InChI fails), as :func:`same_molecule`."""
    m = mol(canonical(smiles, isomeric=False))
    if m is None:
        return None
    try:
        inchi = _rdkit().MolToInchi(m)
    except Exception:  # noqa: BLE001
        inchi = None
    return inchi or _rdkit().MolToSmiles(m)


def same_reactants(pred: str | None, gold: str | None, max_parts: int = 4) -> bool:
    """Retro: the predicted molecules (``.``-separated) are the gold's, as a multiset.

    The official scorer joins the reactant list with ``.`` and compares the whole (``rxn_eval_demo``
    ``evaluate_retro`` + ``MoleculeSMILESEvaluator``: order does not matter). About half of the
    published ``gt`` strings lost the ``.`` between reactants (``"CCOO=C=O"`` for ``CCO`` and ``O=C=O``);
    a gold piece that is not one valid molecule is read as every cut into valid molecules, and the
    answer is right when one cut gives its molecules. A gold piece that is one valid molecule is that
    molecule: it is never cut (issue 43: the cuts of the published one-molecule golds scored 100, e.g.
    ``C.N…`` for a gold that is one molecule, 47 of 47), so a glued gold that happens to be a valid
    SMILES stays unscorable but for that SMILES. This happens at scoring time, so the gold does not
    depend on whether RDKit was importable where the benchmark was prepared.
    """
    if same_molecule(pred, gold, isomeric=False):
        return True
    if _rdkit() is None or not pred or not gold:
        return False
    want = [molecule_key(p) for p in pred.strip().split(".")]
    if None in want or len(want) > max_parts:
        return False
    valid = functools.lru_cache(maxsize=None)(lambda s: mol(s) is not None)
    key = functools.lru_cache(maxsize=None)(molecule_key)

    def fits(pieces: list[str], left: list[str | None]) -> bool:
        if not pieces:
            return not left
        most = 1 if valid(pieces[0]) else len(left) - len(pieces) + 1  # a valid molecule is not cut
        for parts in range(1, most + 1):
            for cut in _decompositions(pieces[0], parts, valid):
                rest: list[str | None] = list(left)
                try:
                    for piece in cut:
                        rest.remove(key(piece))
                except ValueError:
                    continue
                if fits(pieces[1:], rest):
                    return True
        return False

    return fits([p for p in gold.strip().split(".") if p], want)


def _decompositions(text: str, parts: int, valid: Callable[[str], bool]) -> list[list[str]]:
    """Every way to cut ``text`` into ``parts`` consecutive pieces that are each valid SMILES."""
    if parts == 1:
        return [[text]] if valid(text) else []
    found = []
    for i in range(1, len(text)):
        if valid(text[:i]):
            found += [[text[:i], *rest] for rest in _decompositions(text[i:], parts - 1, valid)]
    return found
