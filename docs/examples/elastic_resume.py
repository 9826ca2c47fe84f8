"""A sampler checkpoint written by one rank resumes on two: each remaining window exactly once."""

from torchloom.samplers import WindowSampler


def main() -> None:
    one_rank = WindowSampler([40], window=4, seed=0)  # 37 windows, shuffled per epoch
    first = [int(key) for _, key in zip(range(10), one_rank, strict=False)]  # trained on 10, then saved
    saved = one_rank.state_dict()

    two_ranks = [WindowSampler([40], window=4, seed=0, rank=rank, world_size=2) for rank in range(2)]
    for sampler in two_ranks:
        sampler.load_state_dict(saved)  # the other 27 windows, split between the two ranks
    rest = [int(key) for sampler in two_ranks for key in sampler]
    print(len(rest), two_ranks[0].padded, set(first + rest) == set(range(37)))
    # 28 1 True: 27 windows and 1 repeated to even the ranks (reported by .padded), none lost


if __name__ == "__main__":
    main()
