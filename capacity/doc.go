// Package capacity keeps, in the server's state, how much storage each
// plugin's controller can still provision, and answers whether a volume
// to be created fits.
//
// The Refresher asks every plugin whose controller advertises
// GET_CAPACITY, once per distinct accessible topology of its node
// instances and per parameters class the host names (Config.Classes),
// and writes the answers as one state.SetCapacity per plugin, through
// the host's state.Applier, only when they changed. A failed call keeps
// the last value for its topology and class; the failure is logged once
// until the call succeeds again.
//
// # Usage
//
// The host:
//
//  1. Builds a Refresher with New: its state.Reader as Store, its
//     Applier, and a Controllers that calls GetCapacity through a
//     healthy controller of the plugin (ControllerFunc over its router).
//     Classes are the CreateVolume parameters of its storage classes.
//  2. Runs Run(ctx) on the leader, in its own goroutine, for as long as
//     it leads; Run returns when ctx ends.
//  3. Calls Refresh(pluginID) after each CreateVolume and DeleteVolume
//     of the plugin: it returns at once, and the refresh follows the
//     current pass.
//  4. Before creating a volume, reads state's Capacity(pluginID),
//     builds a Room with NewRoom for the create's class
//     (state.ClassOf(parameters)) and capacity range, and drops the
//     candidate nodes whose topology has no room (Room.Node(topology)
//     not Fits: FitNoRoom, FitTooLarge or FitTooSmall, the reason to
//     show). The nodes left are the candidates whose topologies make the
//     create's accessibility requirements; Room.WithRoom lists the
//     topologies with room directly.
//
// Capacity matters only before a volume exists. state.Feasibility
// answers for a volume that exists (registered, or created): its
// reasons are about claims, node plugins, topology and MaxVolumes, not
// storage. A scheduler placing an allocation with a volume to be
// created asks both: Room for where the volume can be made, and, once
// it exists, Feasibility for where it can be claimed; a node must pass
// both. A node whose topology has no record is FitUnknown, which Fits:
// a plugin without GET_CAPACITY keeps working as before.
//
// Capacity records are the plugins table's: a change raises
// state.TablePlugins' index, so a blocking query on plugins sees it.
package capacity
