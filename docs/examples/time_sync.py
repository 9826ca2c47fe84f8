"""A 10 Hz camera and a 30 Hz IMU with a dropout, aligned on the camera's clock, gaps masked."""

import numpy as np

from torchloom.fusion import TimeSync


def main() -> None:
    camera = (np.arange(0, 2, 0.1), np.arange(20))  # (timestamps, values): 10 Hz frames
    imu_t = np.arange(0, 2, 1 / 30)
    imu_t = imu_t[(imu_t < 0.8) | (imu_t > 1.2)]  # a 0.4 s dropout
    imu = (imu_t, np.sin(imu_t))  # 30 Hz readings
    sync = TimeSync(
        {"camera": camera, "imu": imu},
        reference="camera",
        tolerance=0.05,
        policy="interpolate",
        on_gap="mask",
    )
    masked = [round(step["t"], 1) for step in sync if not step["imu_valid"]]
    print(len(sync), masked, sync.report.skipped["imu"])
    # 20 [0.8, 0.9, 1.0, 1.1, 1.2] 24: 5 frames in the dropout masked; 24 readings fell between frames


if __name__ == "__main__":
    main()
