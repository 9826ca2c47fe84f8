"""LitData's S3 readers for the object-store section, run in ``.venv-peers`` (LitData's own venv).

``python objectstore_litdata.py raw ENDPOINT S3_URL``: ``StreamingRawDataset`` on the prefix;
``optimize JPEG_FOLDER OUTPUT_DIR``: ``litdata.optimize`` of the JPEG bytes (local, then the section
uploads the chunks to the bucket); ``stream ENDPOINT S3_URL CACHE_DIR``: ``StreamingDataset`` over the
chunks in the bucket, its first (cold) epoch. Each prints one JSON line: ``samples`` and ``seconds``
of one pass through ``StreamingDataLoader(batch_size=64, num_workers=2)``, or the error.
"""

from __future__ import annotations

import io
import json
import os
import sys
import time
import traceback
from typing import Any

BATCH, WORKERS = 64, 2


def decode(data: bytes) -> Any:
    import numpy as np
    import torch
    from PIL import Image

    image = np.array(Image.open(io.BytesIO(data)).convert("RGB"))
    return torch.from_numpy(image).permute(2, 0, 1).contiguous()


def decode_sample(sample: dict[str, Any]) -> dict[str, Any]:
    return {"image": decode(sample["image"]), "label": sample["label"]}


def sample_of(path: str) -> dict[str, Any]:
    with open(path, "rb") as handle:
        return {"image": handle.read(), "label": int(os.path.basename(path).split(".")[0]) % 2}


def timed_pass(loader: Any) -> dict[str, Any]:
    started = time.perf_counter()
    samples = 0
    for batch in loader:
        images = batch["image"] if isinstance(batch, dict) else batch
        samples += len(images)
    return {"samples": samples, "seconds": time.perf_counter() - started}


def boto_options(endpoint: str) -> dict[str, Any]:
    return {"endpoint_url": endpoint, "aws_access_key_id": "any", "aws_secret_access_key": "any"}


def main(step: str, *args: str) -> dict[str, Any]:
    import litdata

    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    # obstore (LitData's chunk downloader) refuses a plain-http endpoint unless told to allow it.
    os.environ.setdefault("AWS_ALLOW_HTTP", "true")
    if step == "raw":
        endpoint, url = args
        if not hasattr(litdata, "StreamingRawDataset"):
            return {"error": f"litdata {litdata.__version__} has no StreamingRawDataset"}
        # fsspec-style options (the indexer lists with fsspec); boto-style ones for its downloader.
        options = {"key": "any", "secret": "any", "client_kwargs": {"endpoint_url": endpoint}}
        dataset = litdata.StreamingRawDataset(url, storage_options=options, transform=decode)
        # StreamingDataLoader takes StreamingDatasets only: a raw dataset is a map-style one.
        from torch.utils.data import DataLoader

        loader = DataLoader(dataset, batch_size=BATCH, num_workers=WORKERS)
        return timed_pass(loader)
    if step == "optimize":
        folder, output = args
        paths = sorted(os.path.join(folder, name) for name in os.listdir(folder))
        litdata.optimize(
            fn=sample_of, inputs=paths, output_dir=output, chunk_bytes="64MB", num_workers=WORKERS
        )
        return {"samples": len(paths), "seconds": 0.0}
    if step in ("stream", "stream-boto3"):
        endpoint, url, cache = args
        if step == "stream-boto3":
            # LitData's boto3 path, the one it takes where obstore is not installed (obstore is an
            # optional requirement): its obstore S3Store refuses an http:// endpoint.
            import litdata.streaming.downloader as downloader

            downloader._OBSTORE_AVAILABLE = False  # type: ignore[assignment]
        dataset = litdata.StreamingDataset(
            url,
            storage_options=boto_options(endpoint),
            cache_dir=cache,
            shuffle=True,
            transform=decode_sample,
        )
        loader = litdata.StreamingDataLoader(dataset, batch_size=BATCH, num_workers=WORKERS)
        result = timed_pass(loader)
        chunks = sum(len(files) for _, _, files in os.walk(cache))
        result["note"] = f"Files in its local cache after the pass: {chunks} (chunks and index)."
        return result
    raise SystemExit(f"unknown step {step!r}")


if __name__ == "__main__":
    try:
        outcome = main(*sys.argv[1:])
    except Exception as error:  # reported in the section, with its type and message
        traceback.print_exc()
        outcome = {"error": f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"}
    print(json.dumps(outcome), flush=True)
