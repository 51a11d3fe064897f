"""moeroof.data"""
