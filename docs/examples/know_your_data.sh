python -c "from torchloom.tools.demo import write_demo_data; write_demo_data('project', counts=(30, 14), image_size=64)"
cp -r project/given data && cp -r project/given raw  # data/ as it arrived; raw/ to label by path
torchloom doctor data --out doctor-report  # exit 1: broken files and train/val leaks, each named
torchloom prepare raw --rule 'scratch:scratch/' --rule 'dent:dent/' --out prepared --fractions 0.8,0.2 \
    --seed 0 --group-duplicates --materialize link  # exit 1: the broken files it left out
torchloom doctor prepared --json > prepared.json  # exit 1: no leak, but copies within one split
torchloom show prepared/manifest.parquet --n 16 --out grid.png --transform 'RandomResizedCrop(96),HorizontalFlip()'
torchloom show prepared/manifest.parquet --n 8 --out batch.png --batch
