# In a folder holding data/ (a dataset as it arrived) and raw/ (files to label by path and split).
torchloom doctor data --out doctor-report  # exit 1: broken files and train/val leaks, each named
torchloom prepare raw --rule 'scratch:scratch/' --rule 'dent:dent/' --out prepared --fractions 0.8,0.2 \
    --seed 0 --group-duplicates --materialize link  # exit 1: the broken files it left out
torchloom doctor prepared --json > prepared.json  # exit 1: no leak, but copies within one split
torchloom show prepared/manifest.parquet --n 16 --out grid.png --transform 'RandomResizedCrop(96),HorizontalFlip()'
torchloom show prepared/manifest.parquet --n 8 --out batch.png --batch
