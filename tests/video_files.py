"""Video files made the way cameras, phones, editors and recorders make them, with PyAV, each frame
numbered so a test reads back exactly which frames it got.

Every generated frame carries its number as 12 black-or-white 16×16 blocks, which survive lossy
compression. The makers: a recording whose timestamps start after 0 s, a file whose audio outlasts
its video, an MP4 cut with an edit list (``ffmpeg -ss T -i IN -c copy OUT``), MPEG program and
transport streams, and a phone's portrait video (its display matrix turns the stored frames)."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import torch

BLOCK, BITS = 16, 12  # 64×48 frames: 4 × 3 blocks, frame numbers up to 4095
MILLIS = Fraction(1, 1000)


def numbered(count: int) -> np.ndarray:
    frames = np.zeros((count, 48, 64, 3), np.uint8)
    for number in range(count):
        for bit in range(BITS):
            if number >> bit & 1:
                row, column = divmod(bit, 4)
                frames[number, row * BLOCK : (row + 1) * BLOCK, column * BLOCK : (column + 1) * BLOCK] = 255
    return frames


def gray_ramp(count: int) -> np.ndarray:
    """Frames of rising gray (4 levels a frame) with a white corner: the content on which an MPEG-2
    program stream muxer with B-frames repeats two presentation times."""
    frames = np.repeat((np.arange(count) * 4 % 256).astype(np.uint8), 48 * 64 * 3).reshape(count, 48, 64, 3)
    frames[:, :8, :16] = 255
    return frames


def numbers(frames: np.ndarray | torch.Tensor) -> list[int]:
    """Frame numbers read back from (T, H, W, 3) arrays or (T, 3, H, W) tensors, stored upright."""
    array = frames.permute(0, 2, 3, 1).numpy() if isinstance(frames, torch.Tensor) else frames
    found = []
    for frame in array:
        bits = [
            frame[r * BLOCK + 4 : r * BLOCK + 12, c * BLOCK + 4 : c * BLOCK + 12].mean() > 128
            for r, c in (divmod(bit, 4) for bit in range(BITS))
        ]
        found.append(sum(1 << bit for bit, on in enumerate(bits) if on))
    return found


def decode_everything(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """The straightforward reference: every frame from the start, as stored, with its timestamp."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        decoded = [
            (f.to_ndarray(format="rgb24"), float(f.pts * stream.time_base)) for f in container.decode(stream)
        ]
    return np.stack([f for f, _ in decoded]), np.array([t for _, t in decoded])


def encode(
    path: Path,
    count: int,
    *,
    rate: int = 10,
    codec: str = "libx264",
    gop: int = 25,
    container_format: str | None = None,
    first_pts: float = 0.0,
    audio_seconds: float = 0.0,
    rotation: int = 0,
    matrix: tuple[int, int, int, int] | None = None,
    times: np.ndarray | None = None,
    b_frames: int = 0,
    images: np.ndarray | None = None,
    options: dict[str, str] | None = None,
) -> None:
    """``count`` numbered frames; ``first_pts`` seconds before the first frame (a recording cut
    from a stream), an audio track of ``audio_seconds`` (silence), a display matrix turning the
    frames ``rotation`` degrees counter-clockwise (what a phone held upright records), or the display
    matrix ``a b / c d`` (16.16 fixed point, FFmpeg's order: ``-display_hflip`` is ``-1 0 / 0 1``);
    ``times``: each frame's time in seconds (a variable frame rate, in milliseconds as a phone's
    or a screen recorder's); ``b_frames``: B-frames between references; ``images``: other frames
    than the numbered ones, of any size; ``options``: the muxer's (``{"movflags": "faststart"}``
    puts an MP4's ``moov`` before its media)."""
    images = numbered(count) if images is None else images[:count]
    with av.open(str(path), "w", format=container_format, options=options or {}) as container:
        stream = container.add_stream(codec, rate=rate)
        stream.width, stream.height, stream.pix_fmt = images.shape[2], images.shape[1], "yuv420p"
        stream.codec_context.gop_size = gop
        stream.codec_context.max_b_frames = b_frames
        if first_pts or times is not None:
            stream.codec_context.time_base = MILLIS
        if rotation:
            stream.set_display_rotation(rotation)
        if matrix:
            a, b, c, d = matrix
            stream.set_display_matrix([a, b, 0, c, d, 0, 0, 0, 1 << 30])
        audio = None
        if audio_seconds:
            codec_name = "libopus" if path.suffix == ".webm" else "aac"
            audio = container.add_stream(codec_name, rate=48000, layout="mono")
        for number, image in enumerate(images):
            frame = av.VideoFrame.from_ndarray(image, format="rgb24")
            if first_pts or times is not None:
                seconds = first_pts + (number / rate if times is None else float(times[number]))
                frame.pts, frame.time_base = round(seconds * 1000), MILLIS
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
        if audio is not None:
            _silence(container, audio, audio_seconds)


def _silence(container: av.container.OutputContainer, audio: av.AudioStream, seconds: float) -> None:
    size = audio.codec_context.frame_size or 1024
    for start in range(0, int(seconds * 48000), size):
        frame = av.AudioFrame(format=audio.codec_context.format.name, layout="mono", samples=size)
        for plane in frame.planes:
            plane.update(bytes(plane.buffer_size))
        frame.sample_rate, frame.pts = 48000, start
        container.mux(audio.encode(frame))
    container.mux(audio.encode(None))


def cut_with_edit_list(source: Path, path: Path, seconds: float) -> None:
    """What ``ffmpeg -ss SECONDS -i SOURCE -c copy PATH`` writes: the packets from the keyframe
    before ``seconds`` on, shifted so that ``seconds`` is 0; those before it get negative
    timestamps, which the MP4 muxer hides behind an edit list (``elst``) that skips them."""
    with av.open(str(source)) as reader, av.open(str(path), "w") as writer:
        stream = reader.streams.video[0]
        copied = writer.add_stream_from_template(stream)
        shift = round(seconds / stream.time_base)
        reader.seek(shift, stream=stream, backward=True)
        for packet in reader.demux(stream):
            if packet.dts is None:
                continue  # the flush packet
            packet.pts -= shift
            packet.dts -= shift
            packet.stream = copied
            writer.mux(packet)


def edit_list_skips(path: Path) -> int:
    """The media time (ticks) the first edit of an MP4's edit list starts at: > 0 when it skips
    stored frames."""
    data = path.read_bytes()
    at = data.index(b"elst")
    version = data[at + 4]
    media_time = data[at + 20 : at + 28] if version else data[at + 16 : at + 20]
    return int.from_bytes(media_time, "big", signed=True)
