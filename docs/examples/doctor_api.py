"""doctor and prepare from Python: what is wrong with a dataset as it arrived, then a clean split."""

import tempfile
from pathlib import Path

from torchloom.tools.demo import write_demo_data
from torchloom.tools.doctor import diagnose
from torchloom.tools.prepare import prepare_dataset


def leaks(report) -> int:
    return sum(pair["leak"] for pair in report.document["duplicates"]["pairs"])


def main() -> None:
    with tempfile.TemporaryDirectory() as root:
        write_demo_data(root, counts=(30, 14), image_size=64, progress=False)  # given/{train,val}/<class>/
        given = diagnose(f"{root}/given")
        print(sorted({problem.split(":")[0] for problem in given.problems}), leaks(given))
        # ['empty', 'not_an_image', 'train/val leak', 'truncated'] 2
        print(given.document["classes"]["sampler"])  # the sampler that evens the classes:
        # BalancedSampler(dataset.targets, mode="inverse", seed=0)

        raw = Path(root, "given")
        labels = [(str(path.relative_to(raw)), path.parent.name) for path in sorted(raw.rglob("*.jpg"))]
        result = prepare_dataset(
            str(raw),
            f"{root}/prepared",
            label_entries=labels,
            fractions=(0.8, 0.2),
            group_duplicates=True,
            materialize="link",  # also prepared/<split>/<label>/ folders
        )
        left_out = {kind: len(files) for kind, files in result.problems.items() if files}
        print(result.classes, result.counts().tolist(), left_out)
        # ['dent', 'scratch'] [[11, 3], [25, 7]] {'unreadable': 3}: rows are classes, columns splits
        prepared = diagnose(f"{root}/prepared/manifest.parquet")
        print(leaks(prepared), sorted({problem.split(":")[0] for problem in prepared.problems}))
        # 0 ['duplicate in train']: no leak left, each group of copies in one split (doctor still names them)


if __name__ == "__main__":
    main()
