#!/usr/bin/env bash
# raysub driver (raysub/job/templates/driver_command.sh.j2): the command given after '--', byte-exact.
# The head runs it with RAY_ADDRESS set once the cluster is whole; this Python COMMAND starts
# early, as soon as the head is up, and its ray.init returns once the cluster is whole (--early-driver).
# shellcheck disable=SC2016 # the arguments are single-quoted on purpose: nothing in them expands
exec python train.py --lr 3e-4 --name 'it'"'"'s $HOME'
