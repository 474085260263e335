"""Built-in datasets (registration only; the loaders live in text_data and image_data).

Text datasets take a ``tokenizer`` (bytes by default, ``bpe:<vocab>``, or a local tokenizer);
``configure_text`` sets their ``vocab_size`` from it, and the model follows. Image datasets' defaults set the model keys they imply (image size,
channels, classes, a patch size that divides the image), so ``plan(model="vit",
dataset="digits")`` needs no extra configuration.
"""

import flops_fit

_TEXT = {"modality": "text", "batch_format": {"tokens": "int64[B, T]"}, "tasks": (flops_fit.TASK_CAUSAL_LM,)}
_IMAGES = {
    "modality": "image",
    "batch_format": {"images": "float32[B, C, H, W]", "labels": "int64[B]"},
    "tasks": (flops_fit.TASK_IMAGE_CLASSIFICATION,),
}
_MOD = "flops_fit.plugins.data"
# Text datasets with a tokenizer: vocab_size follows it (text_data.configure_text).
_TOKENIZED = {"configure": f"{_MOD}.text_data:configure_text"}
_TOKENIZER_DEFAULTS = {"tokenizer": "bytes", "vocab_size": None}


@flops_fit.hookimpl
def register_datasets(register):
    register(flops_fit.DatasetEntry(
        "python-stdlib",
        description="The Python standard library's own .py files (offline; bytes, or tokenizer=...); split by file",
        builder=f"{_MOD}.text_data:build_python_stdlib",
        defaults={**_TOKENIZER_DEFAULTS, "seq_len": 256, "validation_fraction": 0.05},
        **_TEXT, **_TOKENIZED,
    ))
    register(flops_fit.DatasetEntry(
        "text-files",
        description="Local text files (paths=[files, folders, globs]; bytes, or tokenizer=...); split by file",
        builder=f"{_MOD}.text_data:build_text_files",
        defaults={**_TOKENIZER_DEFAULTS, "seq_len": 256, "validation_fraction": 0.05},
        **_TEXT, **_TOKENIZED,
    ))
    register(flops_fit.DatasetEntry(
        "token-file",
        description="A pre-tokenised uint16/uint32 token file (path=...), memory-mapped; tokenizer=... (the "
        "tokenizer file that made it) for bits per byte",
        builder=f"{_MOD}.text_data:build_token_file",
        defaults={"dtype": "uint16", "seq_len": 256, "vocab_size": None, "validation_fraction": 0.05},
        configure=f"{_MOD}.text_data:configure_token_file",
        **_TEXT,
    ))
    register(flops_fit.DatasetEntry(
        "tinystories",
        description="TinyStories via `datasets`: local data_files=... (parquet/jsonl/arrow) or the hub; "
        "bytes, or tokenizer=...",
        builder=f"{_MOD}.hf_text:build_tinystories",
        defaults={**_TOKENIZER_DEFAULTS, "seq_len": 256},
        **_TEXT, **_TOKENIZED,
    ))
    register(flops_fit.DatasetEntry(
        "hf-text",
        description="Any text corpus via `datasets`: local data_files=... (parquet/jsonl/json/arrow/csv/txt), "
        "a save_to_disk folder or a hub path=...; text_field=, streaming=, tokenizer=...",
        builder=f"{_MOD}.hf_text:build_hf_text",
        defaults={**_TOKENIZER_DEFAULTS, "seq_len": 256, "text_field": "text", "validation_fraction": 0.05},
        **_TEXT, **_TOKENIZED,
    ))
    register(flops_fit.DatasetEntry(
        "digits",
        description="scikit-learn's 8x8 handwritten digits (1797 images, ships with the package)",
        builder=f"{_MOD}.image_data:build_digits",
        defaults={"image_size": 8, "in_chans": 1, "num_classes": 10, "patch_size": 2},
        **_IMAGES,
    ))
    register(flops_fit.DatasetEntry(
        "glyphs",
        description="Offline corpus that does not run out: 139 characters (digits, Latin, Greek, Cyrillic) from "
        "matplotlib's DejaVu fonts, transformed, coloured, textured and cluttered from each sample's index; "
        "32x32 RGB by default (num_classes=, image_size=, in_chans=, rotation=, clutter=, texture=, inverted=, "
        "noise= set the difficulty); disjoint held-out seeds",
        builder=f"{_MOD}.glyphs:build_glyphs",
        defaults={"image_size": 32, "in_chans": 3, "num_classes": 139, "patch_size": 4, "seed": 0, "clutter": 0.5,
                  "noise": 0.03, "rotation": 25.0, "texture": 0.15, "inverted": 0.5},
        **_IMAGES,
    ))
    register(flops_fit.DatasetEntry(
        "cifar10",
        description="CIFAR-10 through torchvision from a local root=... folder (download=True to fetch)",
        builder=f"{_MOD}.image_data:build_cifar10",
        defaults={"image_size": 32, "in_chans": 3, "num_classes": 10, "patch_size": 4, "download": False,
                  "crop_padding": 0, "flip": False},
        **_IMAGES,
    ))
    register(flops_fit.DatasetEntry(
        "image-folder",
        description="A local ImageFolder tree (root=.../<class>/<image>, or train/ and validation/ trees), resized "
        "to image_size; crop_padding=, flip= augment training; num_classes follows the class folders",
        builder=f"{_MOD}.image_data:build_image_folder",
        configure=f"{_MOD}.image_data:configure_image_folder",
        defaults={"image_size": 32, "in_chans": 3, "num_classes": 10, "patch_size": 4, "validation_fraction": 0.1,
                  "crop_padding": 0, "flip": False},
        **_IMAGES,
    ))
    register(flops_fit.DatasetEntry(
        "hf-images",
        description="Images with integer labels from parquet / arrow / json files (data_files=...) or a save_to_disk "
        "folder (path=...) through `datasets`; image_field=, label_field=; set num_classes",
        builder=f"{_MOD}.image_data:build_hf_images",
        defaults={"image_size": 32, "in_chans": 3, "num_classes": 10, "patch_size": 4, "validation_fraction": 0.1,
                  "crop_padding": 0, "flip": False},
        **_IMAGES,
    ))
