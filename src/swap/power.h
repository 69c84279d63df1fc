/*
 * Power: whether the machine runs on battery, and whether laptop mode is
 * on.  Level 1 does not prefetch in either case, because prefetch spins up
 * a disk that laptop mode tries to keep idle; level 2 prefetches anyway.
 */
#ifndef TC_SWAP_POWER_H
#define TC_SWAP_POWER_H

#include <stdbool.h>

/* True when a battery reports "Discharging" and no mains supply is online
 * (/sys/class/power_supply).  Machines without a battery: false. */
bool sp_on_battery(void);

/* True when /proc/sys/vm/laptop_mode is not 0. */
bool sp_laptop_mode(void);

#endif
