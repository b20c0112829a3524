"""Synthetic text for OCR models: lines of glyphs from a 5x7 pixel font, on noisy paper.

A detector's probability map is its output; blocks of ink that are not letters leave it blank
(PP-OCRv4's detector gave a map whose largest value was 7.7e-7 on them), and an output cosine of
a blank map measures noise, not precision. Letters from a pixel font, scaled and softened, make
both PP-OCR detectors mark 11-17% of the page as text and the recognizers read characters at
confidence near 1, with no font file or drawing package needed. `text_page` draws one image;
`ocr_feed` normalizes it as PP-OCR's pre-processing does.
"""

from __future__ import annotations

import numpy as np

__all__ = ["ocr_feed", "text_page"]

# ImageNet mean and std: PP-OCR detectors' normalization (recognizers and classifiers use 0.5).
_DET_MEAN, _DET_STD = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])

_ROWS = {
    "0": "01110 10001 10011 10101 11001 10001 01110",
    "1": "00100 01100 00100 00100 00100 00100 01110",
    "2": "01110 10001 00001 00010 00100 01000 11111",
    "3": "11110 00001 00001 01110 00001 00001 11110",
    "4": "00010 00110 01010 10010 11111 00010 00010",
    "5": "11111 10000 11110 00001 00001 10001 01110",
    "7": "11111 00001 00010 00100 01000 01000 01000",
    "A": "01110 10001 10001 11111 10001 10001 10001",
    "E": "11111 10000 10000 11110 10000 10000 11111",
    "H": "10001 10001 10001 11111 10001 10001 10001",
    "K": "10001 10010 10100 11000 10100 10010 10001",
    "M": "10001 11011 10101 10101 10001 10001 10001",
    "N": "10001 11001 10101 10011 10001 10001 10001",
    "R": "11110 10001 10001 11110 10100 10010 10001",
    "S": "01111 10000 10000 01110 00001 00001 11110",
    "T": "11111 00100 00100 00100 00100 00100 00100",
    "a": "00000 00000 01110 00001 01111 10001 01111",
    "e": "00000 00000 01110 10001 11111 10000 01110",
    "n": "00000 00000 10110 11001 10001 10001 10001",
    "o": "00000 00000 01110 10001 10001 10001 01110",
}
_GLYPHS = tuple(np.array([[bit == "1" for bit in row] for row in rows.split()], dtype=np.float64)
                for rows in _ROWS.values())
_GLYPH_H, _GLYPH_W = 7, 5


def text_page(rng: np.random.Generator, height: int, width: int, *, lines: bool) -> np.ndarray:
    """An RGB image [height, width, 3] in 0-255: several lines of text (`lines`, a detector's
    page) or one line filling most of the height (a recognizer's or classifier's crop)."""
    ink = np.zeros((height, width))
    top = int(rng.integers(4, 20)) if lines else 0
    while True:
        scale = (int(rng.integers(2, 5)) if lines
                 else max(1, int(height * rng.uniform(0.55, 0.8)) // _GLYPH_H))
        glyph_h = _GLYPH_H * scale
        if lines and top + glyph_h >= height:
            break
        line_top = top if lines else (height - glyph_h) // 2
        _write_line(ink, rng, line_top, scale)
        if not lines:
            break
        top += glyph_h + int(rng.integers(glyph_h // 2, glyph_h * 2))
    ink = _soften(ink)[..., None]
    paper = rng.uniform(200, 255, size=3) + rng.normal(0, 6, size=(height, width, 3))
    colour = rng.uniform(0, 80, size=3)
    return np.clip(paper * (1 - ink) + colour * ink, 0, 255)


def _write_line(ink: np.ndarray, rng: np.random.Generator, top: int, scale: int) -> None:
    width = ink.shape[1]
    x, end = int(rng.integers(2, width // 6)), int(rng.integers(width // 2, width - 2))
    block = np.ones((scale, scale))
    while x + _GLYPH_W * scale < end:
        glyph = _GLYPHS[int(rng.integers(len(_GLYPHS)))]
        ink[top:top + _GLYPH_H * scale, x:x + _GLYPH_W * scale] = np.kron(glyph, block)
        word_gap = int(rng.integers(2, 5)) * scale if rng.random() < 0.15 else 0
        x += (_GLYPH_W + 1) * scale + word_gap


def _soften(ink: np.ndarray) -> np.ndarray:
    """A 3x3 box blur: antialiased edges, as a scan or a rendered font has."""
    padded = np.pad(ink, 1, mode="edge")
    rows, cols = ink.shape
    shifted = [padded[i:i + rows, j:j + cols] for i in range(3) for j in range(3)]
    softened: np.ndarray = np.mean(shifted, axis=0)
    return softened


def ocr_feed(page: np.ndarray, *, detector: bool) -> np.ndarray:
    """`page` (from `text_page`) as a [1, 3, H, W] float32 input: ImageNet mean/std for a
    detector, (x/255 - 0.5) / 0.5 for a recognizer or classifier, as PP-OCR normalizes."""
    scaled = page / 255.0
    normalized = (scaled - _DET_MEAN) / _DET_STD if detector else (scaled - 0.5) / 0.5
    return normalized.transpose(2, 0, 1)[None].astype(np.float32)
