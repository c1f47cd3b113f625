"""A job held to its namespace's group by Spark's configuration alone (README, "A job under
spark-submit"):

    spark-submit --conf spark.rgspark.url=... --conf spark.rgspark.tenant=... \\
        --conf spark.rgspark.namespace=... --conf spark.rgspark.tokenFile=... \\
        examples/throttled_write.py [ROWS]

checks the driver and the executors, writes ROWS rows (20,000 by default) through
`throttle` to Spark's ``noop`` sink, and prints what went through as one JSON line.
"""

from __future__ import annotations

import json
import sys

from pyspark.sql import SparkSession

from rgspark import ResourceGroupClient, throttle


def main(rows: int) -> None:
    spark = SparkSession.builder.appName("rgspark-throttled-write").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    client = ResourceGroupClient.from_conf(spark)  # the spark.rgspark.* keys
    policy = client.check(spark)  # one-line errors, before any data moves

    df = spark.range(rows, numPartitions=4)
    throttle(df, kind="publish").write.format("noop").mode("overwrite").save()

    write = client.stats["publish"].last
    assert write is not None
    print(
        json.dumps(
            {
                "resourceGroup": policy["resourceGroup"],
                "limits": policy["limits"],
                "rows": write.rows,
                "bytes": write.bytes,
                "wall_s": round(write.wall_s, 2),
                "rows_per_s": round(write.rows / write.wall_s) if write.wall_s else None,
                "task_throttled_s": round(write.task_throttled_s, 2),
            }
        )
    )
    spark.stop()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20_000)
