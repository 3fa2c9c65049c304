// A reduction on the host whose gradients are partly in trainers' device slots (slots of
// several GPUs, or beside host trainers): each device slot is copied into its host buffer
// first. Apart from the control server because the copies end in any order and a trainer
// may leave while one is under way: the reduction may start only after the last copy, and
// only while every buffer's trainer is still there (a trainer that left took its buffer).
#pragma once

#include <functional>
#include <vector>

#include "agent/control/local_job.h"
#include "common/status.h"

namespace gcagent::agent {

// Copies the device slots among `ready` (at least one has a device buffer) into their host
// buffers through their trainers' sessions. `then` runs once, on the io thread, after the
// last copy ended: with the first copy's error, else why a buffer is gone, else OK.
void stageDeviceSlots(const std::vector<Contribution>& ready, std::function<void(const Status&)> then);

}  // namespace gcagent::agent
