"""`millrace demo`: the main job end to end, driving every room in turn (the command `demo.cli`, the work `demo.run`).

It lies above all the rooms, so that the frame (`millrace`) imports none of them.
"""
