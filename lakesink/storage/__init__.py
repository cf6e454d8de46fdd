"""Object storage: where tables live (a local folder or an S3, ADLS or GCS URI), the
settings to reach it from Spark and delta-rs, and a Delta log store that makes every
commit on S3 a conditional create."""
